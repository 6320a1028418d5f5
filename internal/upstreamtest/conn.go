package upstreamtest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// Handler answers one request. It is called after the request, body and
// all, has been read and recorded, on the connection's own goroutine: while
// it runs, nothing more is read from the connection. When it returns without
// calling Close, Reset or Silence, the server reads the next request from the
// connection (bytes the peer pipelined stay buffered); when the request asked
// for the connection to close (RFC 9112 §9.3), the server closes it.
//
// A nil Handler answers with an empty 200.
type Handler func(c *Conn, r *Request)

// StreamHandler answers one request whose body may not have arrived yet. It
// is called as soon as the head has been read. body yields the body with
// chunked framing removed, as it arrives, and returns io.EOF at its end;
// reading it also fills r.RawBody, r.Decoded and r.Trailer. body may be read
// only until the handler returns. After the handler returns on a connection
// it left open, the server reads and records whatever the handler left of
// the body, then reads the next request; after Close, Reset or Silence, the
// request is recorded as it stands and nothing more is read.
//
// A StreamHandler decides about Expect: 100-continue (RFC 9110 §10.1.1)
// itself: the server never sends 100 Continue on its own. See Continue.
type StreamHandler func(c *Conn, r *Request, body io.Reader)

// stream turns h into a StreamHandler that reads the whole body first. A
// request whose body does not arrive whole never reaches h.
func (h Handler) stream() StreamHandler {
	h = h.orOK()
	return func(c *Conn, r *Request, body io.Reader) {
		if _, err := io.Copy(io.Discard, body); err != nil {
			return
		}
		h(c, r)
	}
}

type connState int

const (
	stateOpen   connState = iota
	stateClosed           // FIN sent; the rest of the input is discarded
	stateReset            // RST sent
	stateSilent           // nothing more is read or written
)

// Conn is one accepted connection, as a handler sees it. Its methods are
// safe for concurrent use; write errors are ignored because misbehaving
// upstreams are the point and the peer may well be gone.
type Conn struct {
	s   *Server
	nc  net.Conn  // what requests are read from and responses written to
	raw net.Conn  // the TCP connection: nc, or the one under its TLS
	tls *tls.Conn // nil on a plain TCP server
	n   int

	mu       sync.Mutex
	state    connState
	served   int
	idle     time.Duration
	req      *Request // the request being handled
	announce []Field  // added to every response written with Respond
}

// N returns the connection's 1-based number on its server, in accept order.
func (c *Conn) N() int { return c.n }

// Served returns the number of requests whose head has been read on this
// connection so far; inside a handler, that is the handled request's Seq.
func (c *Conn) Served() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.served
}

// Done returns a channel closed when the server starts closing. A handler
// that waits for anything must also stop waiting when it is closed.
func (c *Conn) Done() <-chan struct{} { return c.s.done }

// Write writes b as it is. Errors are ignored.
func (c *Conn) Write(b []byte) { c.nc.Write(b) }

// WriteString writes s as it is. Errors are ignored.
func (c *Conn) WriteString(s string) { io.WriteString(c.nc, s) }

// Respond writes a complete response with a single write: the status line,
// the announced fields (see KeepAliveTimeout), header, "Connection: close"
// if the request asked for it, Content-Length and body. For 1xx and 204 it
// writes neither Content-Length nor body, for 304 and for a HEAD request no
// body (RFC 9110 §8.6, §6.4.1).
func (c *Conn) Respond(code int, body string, header ...Field) {
	c.mu.Lock()
	req, announce := c.req, c.announce
	c.mu.Unlock()

	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", code, reason(code))
	interim := code >= 100 && code < 200
	if !interim {
		header = append(announce[:len(announce):len(announce)], header...)
		if req != nil && req.wantsClose() {
			header = append(header, Field{"Connection", "close"})
		}
	}
	for _, f := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", f.Name, f.Value)
	}
	if !interim && code != 204 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	if !interim && code != 204 && code != 304 && (req == nil || req.Method != "HEAD") {
		b.WriteString(body)
	}
	c.WriteString(b.String())
}

// Close closes the connection normally: it sends FIN at once (a TLS
// connection's close_notify first), and the server then discards whatever
// the peer still sends until the peer closes too (or the server is closed),
// so that unread input never turns the FIN into an RST. It does nothing once
// the connection is closed, reset or silenced.
func (c *Conn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateOpen {
		return
	}
	c.state = stateClosed
	if c.tls != nil {
		c.tls.CloseWrite()
	}
	// TCP and Unix connections both close one direction.
	if hc, ok := c.raw.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
	} else {
		c.raw.Close()
	}
}

// CloseNotify, on a TLS connection, sends a close_notify alert and nothing
// else: the TCP connection stays open, without a FIN, and the server
// discards what the peer still sends, as after Close. On a plain TCP
// connection it is Close.
func (c *Conn) CloseNotify() {
	if c.tls == nil {
		c.Close()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateOpen {
		return
	}
	c.state = stateClosed
	c.tls.CloseWrite()
}

// TLS returns the state of the connection's TLS handshake, complete when a
// handler runs; ok is false on a plain TCP server.
func (c *Conn) TLS() (state tls.ConnectionState, ok bool) {
	if c.tls == nil {
		return tls.ConnectionState{}, false
	}
	return c.tls.ConnectionState(), true
}

// Reset aborts the connection: it sets SO_LINGER to 0 and closes, so the
// kernel sends RST and the peer's reads fail with ECONNRESET. It works in
// every state but reset.
func (c *Conn) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateReset {
		return
	}
	c.state = stateReset
	if tc, ok := c.raw.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.raw.Close()
}

// Silence makes the connection stop: once the handler returns, the server
// reads nothing more from it and writes nothing, and keeps it open until the
// server is closed. It does nothing unless the connection is open.
func (c *Conn) Silence() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateOpen {
		c.state = stateSilent
	}
}

// SetIdleTimeout makes the server close the connection (as Close does) when
// no byte of a next request has arrived within d after a handler returned,
// like an upstream's keep-alive timeout. Zero, the default, waits forever.
func (c *Conn) SetIdleTimeout(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.idle = d
}

func (c *Conn) announceField(f Field) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, a := range c.announce {
		if strings.EqualFold(a.Name, f.Name) {
			c.announce[i] = f
			return
		}
	}
	c.announce = append(c.announce, f)
}

func (c *Conn) current() connState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// serve runs the n-th connection, nc: read a request, let the handler
// act, repeat.
func (s *Server) serve(nc net.Conn, n int) {
	c := &Conn{s: s, nc: nc, raw: nc, n: n}
	if s.tls != nil {
		c.tls = tls.Server(nc, s.tls)
		c.nc = c.tls
	}
	defer c.nc.Close() // over TLS, with its close_notify

	if c.tls != nil {
		c.raw.SetDeadline(time.Now().Add(10 * time.Second))
		err := c.tls.Handshake()
		c.raw.SetDeadline(time.Time{})
		if err != nil {
			// The alert that refused the handshake is sent; reading what
			// the peer still sends until it goes keeps the close from
			// turning into a reset that could overtake the alert.
			io.Copy(io.Discard, c.raw)
			return
		}
	}
	br := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		if !c.awaitRequest(br) {
			return
		}
		seq := c.Served() + 1
		r, fr, err := readHead(br)
		if err != nil {
			s.fail(c.n, seq, err)
			if errors.Is(err, ErrMalformed) {
				c.WriteString("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
				c.Close()
				c.drain(br)
			}
			return
		}
		r.Conn, r.Seq = c.n, seq
		c.mu.Lock()
		c.served, c.req = seq, r
		c.mu.Unlock()

		body := newBodyReader(br, r, fr, func() { s.record(r) })
		s.h(c, r, body)

		switch c.current() {
		case stateReset:
			body.abandon()
			return
		case stateSilent:
			body.abandon()
			<-s.done
			return
		case stateClosed:
			body.abandon()
			c.drain(br)
			return
		}
		if _, err := io.Copy(io.Discard, body); err != nil {
			body.abandon()
			if errors.Is(err, ErrMalformed) {
				s.fail(c.n, seq, err)
			}
			c.Close()
			c.drain(br)
			return
		}
		if r.wantsClose() {
			c.Close()
			c.drain(br)
			return
		}
	}
}

// awaitRequest waits for the first byte of a next request, for at most the
// idle timeout, and reports whether one arrived. On timeout it closes the
// connection.
func (c *Conn) awaitRequest(br *bufio.Reader) bool {
	c.mu.Lock()
	idle := c.idle
	c.mu.Unlock()
	if idle <= 0 || br.Buffered() > 0 {
		_, err := br.Peek(1)
		return err == nil
	}
	c.nc.SetReadDeadline(time.Now().Add(idle))
	_, err := br.Peek(1)
	c.nc.SetReadDeadline(time.Time{})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.Close()
		c.drain(br)
	}
	return err == nil
}

// drain discards input until the peer closes or the server closes the
// connection.
func (c *Conn) drain(br *bufio.Reader) {
	io.Copy(io.Discard, br)
}

// reason returns the reason phrase for code, or "Status" for codes it does
// not know.
func reason(code int) string {
	switch code {
	case 100:
		return "Continue"
	case 200:
		return "OK"
	case 201:
		return "Created"
	case 204:
		return "No Content"
	case 301:
		return "Moved Permanently"
	case 302:
		return "Found"
	case 304:
		return "Not Modified"
	case 400:
		return "Bad Request"
	case 404:
		return "Not Found"
	case 408:
		return "Request Timeout"
	case 413:
		return "Content Too Large"
	case 417:
		return "Expectation Failed"
	case 429:
		return "Too Many Requests"
	case 500:
		return "Internal Server Error"
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	}
	return "Status"
}
