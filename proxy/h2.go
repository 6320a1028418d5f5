package proxy

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/h2"
)

// HTTP/2 from clients. A connection whose TLS handshake settled on h2, or
// that opens with the HTTP/2 preface on a listener that takes h2c, is
// served by the h2 engine; each of its streams becomes a Session like an
// HTTP/1.1 request, on a conn of its own over the stream (streamConn): the
// main line, hooks, retries, balancing, access log and Proxy-Status do not
// change with the protocol.

// h2Preface is the start of the HTTP/2 client connection preface (RFC 9113
// §3.4), which an HTTP/1.1 reader sees as a request head of its own.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// isPreface reports whether the head buffered in r is the HTTP/2 preface.
func isPreface(r *h1.Reader) bool {
	return bytes.HasPrefix(r.Peek(), []byte(h2Preface[:16]))
}

// runH2 serves the connection as HTTP/2 until it ends, and closes it, or
// until it idles parkAfter, when the parker takes it (as it takes an idle
// HTTP/1.1 connection) and the goroutine ends: an idle HTTP/2 connection
// then costs its memory, not a goroutine's stack too. The parker starts a
// goroutine for it again (conn.serve calls runH2) when the client sends
// or closes, at its idle timeout, or as the server shuts down, and the
// engine goes on from where it stopped. The first goroutine is one of its
// own, started with the smallest stack, not the one that made the TLS
// handshake (whose stack grew for it). prefix holds what was read of the
// connection already (the preface, on a cleartext listener).
func (c *conn) runH2(prefix []byte) {
	parked := false
	defer func() {
		if v := recover(); v != nil {
			parked = false
			c.recovered(v)
		}
		if !parked {
			c.close()
			c.srv.forget(c)
		}
	}()
	hc := c.h2.Load()
	if hc == nil {
		hc = c.startH2(prefix)
	}
	for hc.Serve() == h2.ErrIdle {
		if c.srv.parker.park(c, hc.IdleDeadline()) {
			parked = true // the parker owns the connection now
			return
		}
	}
}

// startH2 makes the HTTP/2 engine of the connection.
func (c *conn) startH2(prefix []byte) *h2.Conn {
	srv := c.srv
	settings := srv.H2
	settings.IdleTimeout = srv.idleTimeout()
	if srv.parker != nil && settings.IdleTimeout > parkAfter {
		settings.ParkAfter = parkAfter
	}
	if settings.ErrorLog == nil {
		settings.ErrorLog = srv.ErrorLog
	}
	c.nc.SetDeadline(time.Time{})
	c.writeBy = time.Time{}
	hc := h2.NewConn(c.nc, prefix, &settings, c.serveStream)
	c.h2.Store(hc)
	if srv.Draining() {
		// Shutdown began before the engine was there to be told.
		hc.Shutdown()
	}
	return hc
}

// serveStream serves one stream of an HTTP/2 connection as a Session, on
// a conn of its own that Shutdown and the drain timeout see as any other.
func (c *conn) serveStream(st *h2.Stream) {
	srv := c.srv
	ss := streamPool.Get().(*streamServe)
	sc, sub := &ss.sc, &ss.c
	sc.reset(st, c.nc)
	*sub = conn{srv: srv, nc: sc, raw: sc, ln: c.ln, client: c.client, clientIP: c.clientIP,
		trusted: c.trusted, state: c.state, stream: true}
	sub.r.Reset(sc)
	sub.ready.init(sc, &sub.r, nil, false)
	srv.mu.Lock()
	srv.conns[sub] = struct{}{}
	srv.wg.Add(1)
	srv.mu.Unlock()
	defer func() {
		if v := recover(); v != nil {
			sub.recovered(v)
		}
		sub.close()
		srv.forget(sub)
		*sub = conn{}
		sc.reset(nil, nil)
		streamPool.Put(ss)
	}()
	s := sub.session()
	sub.borrow()
	s.Stream = st.ID()
	var err error
	known := int64(-1)
	if n, whole := st.Arrived(); whole && n <= prereadMax {
		// The body came whole with the head: it goes upstream with its
		// length, in the head's write, read ahead (reqBody.preread)
		// rather than pumped.
		known, sc.whole = int64(n), true
	}
	sc.method, sc.chunked, err = requestFromH2(&s.Request, st.Header(), st.NoBody(), known)
	if err != nil {
		s.answerBadRequest(err)
		return
	}
	// A stream may wait long for its upstream (a gRPC stream minutes, for
	// its next message): when the client resets it, the wait is cut, at
	// once or within cancelGrace (see cut), and the try ends as the
	// client's fault (see gone).
	st.OnAbort(ss.cutUp)
	defer st.OnAbort(nil) // before sub is reset for reuse
	s.serve()
}

// gone reports whether c is an HTTP/2 stream its client has reset (or
// whose connection ended) while its response was under way.
func (c *conn) gone() bool {
	sc, ok := c.raw.(*streamConn)
	if !ok || sc.out == outDone {
		return false
	}
	select {
	case <-sc.st.Done():
		return true
	default:
		return false
	}
}

// streamServe is what serving a stream takes besides its Session (which
// comes from sessionPool): its conn and streamConn, allocated together and
// reused, buffers included, by later streams.
type streamServe struct {
	c     conn
	sc    streamConn
	cutUp func() // cut, made once: OnAbort takes it without allocating
}

var streamPool = sync.Pool{New: func() any {
	ss := new(streamServe)
	ss.cutUp = ss.cut
	return ss
}}

// cut ends the wait for the upstream of the try in progress, if any, within
// cancelGrace: the stream's client is gone. It runs on the HTTP/2
// connection's goroutine; under upMu it cannot touch a connection the
// session has let go of (to the pool, where another request may have it).
func (ss *streamServe) cut() {
	c := &ss.c
	c.upMu.Lock()
	if up := c.upstream.Load(); up != nil {
		by := time.Now()
		if _, multiplexed := up.Conn.(*streamUp); !multiplexed {
			by = by.Add(cancelGrace)
		}
		up.SetDeadline(by)
	}
	c.upMu.Unlock()
}

// cancelGrace is how long the wait for an HTTP/1.1 upstream goes on after
// the client reset its stream (an HTTP/2 upstream's stream is reset at
// once: its connection is not at stake). An answer that comes whole within it goes
// nowhere, but its connection goes back to the pool (relay releases it
// before writing to the client); a connection cut while a request is on
// it can only be closed. Browsers reset streams often (a navigation, a
// prefetch not needed), and each reset cost a new upstream connection.
// A wait longer than this ends as before, as the client's fault.
var cancelGrace = 100 * time.Millisecond

// requestFromH2 maps the header block of a request stream onto an
// HTTP/1.1 request head (RFC 9113 §8.3.1): :authority becomes Host, first,
// cookie fields are joined into one (§8.2.3), and a body of unknown length
// goes upstream chunked, unless known, the length of a body that has
// arrived whole, is not -1. The engine has checked the block (pseudo fields,
// lowercase names, no connection-specific fields, no CR, LF or NUL); what
// becomes HTTP/1.1 bytes is checked again here by HTTP/1.1's own rules, so
// that no field can turn into another head upstream (request smuggling).
// It returns the method and whether the body is to be chunked.
func requestFromH2(req *h1.Request, fields []hpack.HeaderField, noBody bool, known int64) (method string, chunked bool, err error) {
	var path, authority, host string
	cookies := 0
	for _, f := range fields {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			path = f.Value
		case ":authority":
			authority = f.Value
		case "host":
			host = f.Value
		case "cookie":
			cookies++
		}
	}
	if authority == "" {
		authority = host
	}
	target := path
	if method == "CONNECT" {
		target = authority
	}
	if !h1.ValidName(method) || !validTarget(target) || !h1.ValidValue(authority) {
		return "", false, &h1.Error{Status: 400, Msg: "invalid :method, :path or :authority"}
	}
	req.Minor = 1
	req.SetMethod(internMethod(method))
	req.SetTarget(target)
	if authority != "" {
		req.Header.Add("Host", authority)
	}
	hasLength := false
	for i, f := range fields {
		switch {
		case strings.HasPrefix(f.Name, ":") || f.Name == "host":
			continue
		case !h1.ValidName(f.Name) || !h1.ValidValue(f.Value):
			return "", false, &h1.Error{Status: 400, Msg: "invalid header field " + strconv.Quote(f.Name)}
		case f.Name == "cookie" && cookies > 1:
			joinCookies(req, fields[i:])
			cookies = 0
			continue
		case f.Name == "cookie" && cookies == 0:
			continue // joined already
		case f.Name == "content-length":
			hasLength = true
		}
		req.Header.Add(f.Name, f.Value)
	}
	switch {
	case hasLength || noBody:
	case known >= 0:
		req.Header.Add("Content-Length", strconv.FormatInt(known, 10))
	default:
		// A body of unknown length: HTTP/1.1 carries it chunked.
		req.Header.Add("Transfer-Encoding", "chunked")
		chunked = true
	}
	return method, chunked, nil
}

// validTarget reports whether t can be a request-target on an HTTP/1.1
// request line: not empty, no whitespace or control characters.
func validTarget(t string) bool {
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// joinCookies adds the one Cookie field that the cookie fields of fields
// make, in their order (RFC 9113 §8.2.3).
func joinCookies(req *h1.Request, fields []hpack.HeaderField) {
	var v []byte
	for _, f := range fields {
		if f.Name != "cookie" {
			continue
		}
		if len(v) > 0 {
			v = append(v, "; "...)
		}
		v = append(v, f.Value...)
	}
	req.Header.AddBytes([]byte("cookie"), v)
}

// internMethod returns the common methods as constants, so that Method()
// of an HTTP/2 request allocates no more than an HTTP/1.1 one's.
func internMethod(m string) string {
	for _, k := range [...]string{"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE"} {
		if m == k {
			return k
		}
	}
	return m
}

// takePreface takes what was read of a connection that opened with the
// HTTP/2 preface, and reports whether it is to be served as HTTP/2 (on a
// listener that takes h2c). Elsewhere it tells the client, in HTTP/2, that
// the listener speaks HTTP/1.1 only (GOAWAY with HTTP_1_1_REQUIRED), rather
// than answering in a protocol it does not read.
func (c *conn) takePreface() (prefix []byte, ok bool) {
	prefix = append([]byte(nil), c.r.Peek()...)
	c.r.Discard(len(prefix))
	c.r.Release()
	c.giveBack()
	if c.ln != nil && c.ln.h2c {
		return prefix, true
	}
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	fr := http2.NewFramer(c.nc, nil)
	fr.WriteSettings()
	fr.WriteGoAway(0, http2.ErrCodeHTTP11Required, []byte("this listener speaks HTTP/1.1 only"))
	c.linger = true
	return nil, false
}
