package proxy

import (
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/h2"
)

// h2exchange is one stream of an HTTP/2 client connection as the
// downstream of its request: the request body is the stream's DATA, and
// the response goes straight to frames, the head as HEADERS, the body as
// DATA, the trailers as a last HEADERS, a cut as RST_STREAM. It is pooled,
// buffers included, for later streams.
type h2exchange struct {
	st    *h2.Stream
	c     *conn // the client connection: its addresses, TLS state, listener
	s     *Session
	wbuf  []byte // the Session's write buffer (an HTTP/1.1 upstream's head)
	cutUp func() // abandon, made once: OnAbort takes it without allocating
	flight

	// The request body.
	rbuf   []byte
	reqEnd bool // the body ended (read to io.EOF)
	whole  bool // it had all arrived when the stream was served
	bodyRoom

	streamAnswer // the response; ended: END_STREAM sent

	before, after *h2exchange // the connection's streams being served (conn.streams)
}

var exchangePool = sync.Pool{New: func() any {
	x := new(h2exchange)
	x.cutUp = x.abandon
	return x
}}

// serveStream serves one stream of an HTTP/2 connection as a Session.
func (c *conn) serveStream(st *h2.Stream) {
	srv := c.srv
	x := exchangePool.Get().(*h2exchange)
	x.reset(st, c)
	// Registered with its connection, not the server: no lock every
	// stream of every connection takes. Nor does the stream count itself
	// in srv.wg: the connection's own count there is held while its
	// streams run (h2.Conn.Serve waits for their handlers, and does not
	// park while one runs).
	c.addStream(x)
	s := sessionPool.Get().(*Session)
	s.c, s.srv, s.down, s.wbuf, s.flight = c, srv, x, &x.wbuf, &x.flight
	s.reset()
	x.s = s
	defer func() {
		if v := recover(); v != nil {
			c.srv.ErrorLog.Error("internal error serving an HTTP/2 stream; resetting it", "panic", v, "client", c.client)
			x.abort()
		}
		x.finish()
		c.removeStream(x)
		s.release()
		x.reset(nil, nil)
		exchangePool.Put(x)
	}()
	s.Stream = st.ID()
	if n, whole := st.Arrived(); whole && n <= prereadMax {
		// The body came whole with the head: it goes upstream with its
		// length, in the head's write, read ahead (reqBody.preread)
		// rather than pumped.
		x.whole = true
	}
	if err := requestFromH2(&s.Request, st.Header()); err != nil {
		s.answerBadRequest(err)
		return
	}
	// A stream may wait long for its upstream (a gRPC stream minutes, for
	// its next message): when the client resets it, the wait is cut, at
	// once or within cancelGrace (see abandon), and the try ends as the
	// client's fault (see gone).
	st.OnAbort(x.cutUp)
	defer st.OnAbort(nil)
	s.serve()
}

// reset readies x for the stream st of c, keeping its buffers.
func (x *h2exchange) reset(st *h2.Stream, c *conn) {
	*x = h2exchange{st: st, c: c, cutUp: x.cutUp, wbuf: x.wbuf[:0], rbuf: x.rbuf, streamAnswer: x.resetAnswer()}
}

// addStream records x among c's streams being served.
func (c *conn) addStream(x *h2exchange) {
	c.mu.Lock()
	x.after = c.streams
	if x.after != nil {
		x.after.before = x
	}
	c.streams = x
	c.mu.Unlock()
}

// removeStream forgets x, served.
func (c *conn) removeStream(x *h2exchange) {
	c.mu.Lock()
	if x.before != nil {
		x.before.after = x.after
	} else {
		c.streams = x.after
	}
	if x.after != nil {
		x.after.before = x.before
	}
	x.before, x.after = nil, nil
	c.mu.Unlock()
}

// eachStream calls f for each of c's streams being served, with c's lock
// held: a stream is not removed, nor its exchange recycled for another,
// while f has it (the end of a drain resets them).
func (c *conn) eachStream(f func(*h2exchange)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for x := c.streams; x != nil; x = x.after {
		f(x)
	}
}

func (x *h2exchange) inFlight() *flight { return &x.flight }

// abandon ends the wait for the upstream of the try in progress, if any:
// the stream's client is gone. It runs on the HTTP/2 connection's
// goroutine.
func (x *h2exchange) abandon() { x.flight.abandon() }

// finish ends the stream as the response did: complete, or cut
// (RST_STREAM), never a cut that looks complete. A request body left
// unread after a complete response is refused with RST_STREAM(NO_ERROR)
// (RFC 9113 §8.1).
func (x *h2exchange) finish() {
	switch {
	case x.severed.Load():
	case !x.ended:
		x.abort()
	case !x.reqEnd:
		x.st.Reset(http2.ErrCodeNo)
	}
}

func (x *h2exchange) framing(f h1.Framing) h1.Framing {
	switch {
	case x.st.NoBody():
		return h1.Framing{Kind: h1.NoBody}
	case f.Kind == h1.Length || x.s.Request.Header.Has("Content-Length"):
		return f // its content-length, which the engine holds the DATA to
	case x.whole:
		n, _ := x.st.Arrived()
		return h1.Framing{Kind: h1.Length, Length: int64(n)}
	case earlyMethod(x.s.Request.Method()) && x.st.AwaitBody(time.Now().Add(bodyProbe)):
		return h1.Framing{Kind: h1.NoBody}
	}
	// A body of unknown length, which HTTP/1.1 carries chunked.
	return h1.Framing{Kind: h1.Chunked}
}

func (x *h2exchange) body(f h1.Framing) requestBody {
	x.reqEnd = f.Empty()
	return x
}

// h2ReadBuf is the size of an h2exchange's read buffer: a DATA frame's
// default largest payload.
const h2ReadBuf = 16 << 10

func (x *h2exchange) next() ([]byte, error) {
	if x.reqEnd {
		return nil, io.EOF
	}
	if x.rbuf == nil {
		x.rbuf = make([]byte, h2ReadBuf)
	}
	n, err := x.st.Read(x.rbuf)
	if err := x.charge(n); err != nil {
		return nil, err
	}
	if err == nil {
		if left, whole := x.st.Arrived(); left == 0 && whole {
			err = io.EOF // the end came with these bytes
		}
	}
	if err == io.EOF {
		x.reqEnd = true
	}
	return x.rbuf[:n], err
}

func (x *h2exchange) data() bool { return true }

func (x *h2exchange) ready() bool {
	if x.reqEnd {
		return true
	}
	n, whole := x.st.Arrived()
	return n > 0 || whole
}

func (x *h2exchange) done() bool { return x.reqEnd }

func (x *h2exchange) buffered() int {
	n, _ := x.st.Arrived()
	return n
}

func (x *h2exchange) addTrailers(h *h1.Header) {
	for _, f := range x.st.Trailers() {
		h.Add(f.Name, f.Value)
	}
}

func (x *h2exchange) framed() bool { return false }

func (x *h2exchange) setReadDeadline(t time.Time) { x.st.SetReadDeadline(t) }

func (x *h2exchange) prefetch(int64) {} // the stream holds what has arrived

func (x *h2exchange) mustDrain() bool { return false }

func (x *h2exchange) interim(resp *h1.Response) error {
	if err := x.interimFields(resp, "HTTP/2"); err != nil {
		return err
	}
	x.s.BytesOut += int64(headSize(x.fields))
	return x.writeErr(x.st.WriteHeaders(x.fields, false))
}

func (x *h2exchange) takesChunked() bool { return false }

func (x *h2exchange) send(p []byte, end bool, trailers *h1.Header) error {
	if x.severed.Load() {
		return errStreamCut
	}
	return x.write(h2wire{x.st}, &x.s.BytesOut, p, end, trailers)
}

// h2wire is an HTTP/2 stream as an answerWire.
type h2wire struct{ *h2.Stream }

func (w h2wire) writeHead(fields []hpack.HeaderField, body []byte, end bool) error {
	return w.WriteResponse(fields, body, end)
}

func (w h2wire) writeTrailers(fields []hpack.HeaderField) error { return w.WriteTrailers(fields) }

var errStreamCut = errors.New("proxy: the HTTP/2 stream was reset")

func (x *h2exchange) sendFile(fb *FileBody) error {
	return copyFile(fb, func(p []byte) error { return x.send(p, false, nil) })
}

func (x *h2exchange) tunnel(*h1.Response, net.Conn, []byte) error {
	return errors.New("proxy: 101 Switching Protocols cannot go to an HTTP/2 client")
}

func (x *h2exchange) abort() {
	if x.severed.CompareAndSwap(false, true) {
		x.st.Reset(http2.ErrCodeInternal)
	}
}

func (x *h2exchange) gone() bool {
	if x.ended {
		return false
	}
	select {
	case <-x.st.Done():
		return true
	default:
		return false
	}
}

// requestFromH2 maps the header block of a request stream onto a request
// head (RFC 9113 §8.3.1): :authority becomes Host, first, and cookie
// fields are joined into one (§8.2.3). The engine has checked the block
// (pseudo fields, lowercase names, no connection-specific fields, no CR, LF
// or NUL); what an HTTP/1.1 upstream would get as bytes is checked again
// here by HTTP/1.1's own rules, so that no field can turn into another head
// upstream (request smuggling).
func requestFromH2(req *h1.Request, fields []hpack.HeaderField) error {
	var method, path, authority, host string
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
		return &h1.Error{Status: 400, Msg: "invalid :method, :path or :authority"}
	}
	req.Minor = 1
	req.SetMethod(internMethod(method))
	req.SetTarget(target)
	if authority != "" {
		req.Header.Add("Host", authority)
	}
	for i, f := range fields {
		switch {
		case strings.HasPrefix(f.Name, ":") || f.Name == "host":
			continue
		case !h1.ValidName(f.Name) || !h1.ValidValue(f.Value):
			return &h1.Error{Status: 400, Msg: "invalid header field " + strconv.Quote(f.Name)}
		case f.Name == "cookie" && cookies > 1:
			joinCookies(req, fields[i:])
			cookies = 0
			continue
		case f.Name == "cookie" && cookies == 0:
			continue // joined already
		}
		req.Header.Add(f.Name, f.Value)
	}
	return nil
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
