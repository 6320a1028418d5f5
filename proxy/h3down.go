package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/qpack"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/h3"
)

// h3exchange is one request stream of an HTTP/3 client connection as the
// downstream of its request: the request body is the stream's DATA, and
// the response goes straight to frames, the head as HEADERS, the body as
// DATA, the trailers as a last HEADERS, a cut as a reset of the stream. It
// is pooled, buffers included, for later streams.
type h3exchange struct {
	st    *h3.Stream
	q     *quicConn
	s     *Session
	wbuf  []byte // the Session's write buffer (an HTTP/1.1 upstream's head)
	cutUp func() // abandon, made once
	flight

	// The request body.
	rbuf   []byte
	reqEnd bool
	bodyRoom

	// The response.
	streamAnswer
	qfields []qpack.HeaderField // the fields as QPACK takes them
	fin     atomic.Bool         // the response is ending: the stream's end is no reset
}

var h3ExchangePool = sync.Pool{New: func() any {
	x := new(h3exchange)
	x.cutUp = x.abandon
	return x
}}

// serveStream serves one request stream of an HTTP/3 connection as a
// Session.
func (q *quicConn) serveStream(st *h3.Stream) {
	c := q.c
	srv := c.srv
	x := h3ExchangePool.Get().(*h3exchange)
	x.reset(st, q)
	srv.mu.Lock()
	srv.streams[x] = struct{}{}
	srv.wg.Add(1)
	srv.mu.Unlock()
	s := sessionPool.Get().(*Session)
	s.c, s.srv, s.down, s.wbuf, s.flight = c, srv, x, &x.wbuf, &x.flight
	s.reset()
	s.TLS = q.tlsState()
	s.http3 = true
	s.Early = st.Early()
	x.s = s
	// When the client stops the stream (STOP_SENDING, with its reset),
	// the wait for the upstream is cut, as for an HTTP/2 stream.
	cutDone := make(chan struct{})
	stop := context.AfterFunc(st.Context(), func() {
		defer close(cutDone)
		if !x.fin.Load() {
			x.cutUp()
		}
	})
	defer func() {
		if !stop() {
			<-cutDone // it ran, or runs: x is not reused under it
		}
		if v := recover(); v != nil {
			srv.ErrorLog.Error("internal error serving an HTTP/3 stream; resetting it", "panic", v, "client", c.client)
			x.abort()
		}
		srv.mu.Lock()
		delete(srv.streams, x)
		srv.mu.Unlock()
		srv.wg.Done()
		s.release()
		x.reset(nil, nil)
		h3ExchangePool.Put(x)
	}()
	x.fields = x.fields[:0]
	for _, f := range st.Header() {
		x.fields = append(x.fields, hpack.HeaderField{Name: f.Name, Value: f.Value})
	}
	if err := requestFromH2(&s.Request, x.fields); err != nil {
		s.answerBadRequest(err)
		return
	}
	s.serve()
}

// reset readies x for the stream st of q, keeping its buffers.
func (x *h3exchange) reset(st *h3.Stream, q *quicConn) {
	clear(x.qfields[:cap(x.qfields)])
	*x = h3exchange{st: st, q: q, cutUp: x.cutUp, wbuf: x.wbuf[:0], rbuf: x.rbuf, streamAnswer: x.resetAnswer(),
		qfields: x.qfields[:0]}
}

func (x *h3exchange) inFlight() *flight { return &x.flight }

// abandon ends the wait for the upstream of the try in progress, if any:
// the stream's client is gone.
func (x *h3exchange) abandon() { x.flight.abandon() }

func (x *h3exchange) framing(f h1.Framing) h1.Framing {
	st := x.st
	if earlyMethod(x.s.Request.Method()) && st.ContentLength() < 0 {
		// Whether a request in early data may go upstream depends on
		// its having no body: wait for the stream to tell, within the
		// header timeout. Any other waits a little (bodyProbe).
		wait := bodyProbe
		if x.s.Early {
			wait = x.s.srv.headerTimeout()
		}
		st.AwaitBody(time.Now().Add(wait))
	}
	switch {
	case st.NoBody():
		return h1.Framing{Kind: h1.NoBody}
	case f.Kind == h1.Length || x.s.Request.Header.Has("Content-Length"):
		return f // its content-length, which the wire holds the DATA to
	}
	// A body of unknown length, which HTTP/1.1 carries chunked.
	return h1.Framing{Kind: h1.Chunked}
}

func (x *h3exchange) body(f h1.Framing) requestBody {
	x.reqEnd = f.Empty()
	return x
}

func (x *h3exchange) next() ([]byte, error) {
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
	if err == io.EOF {
		x.reqEnd = true
	}
	return x.rbuf[:n], err
}

func (x *h3exchange) data() bool { return true }

func (x *h3exchange) ready() bool { return x.reqEnd || x.st.Buffered() > 0 }

func (x *h3exchange) done() bool { return x.reqEnd }

func (x *h3exchange) buffered() int { return x.st.Buffered() }

func (x *h3exchange) addTrailers(h *h1.Header) {
	for _, f := range x.st.Trailers() {
		h.Add(f.Name, f.Value)
	}
}

func (x *h3exchange) framed() bool { return false }

func (x *h3exchange) setReadDeadline(t time.Time) { x.st.SetReadDeadline(t) }

func (x *h3exchange) prefetch(int64) {}

func (x *h3exchange) mustDrain() bool { return false }

func (x *h3exchange) interim(resp *h1.Response) error {
	if err := x.interimFields(resp, "HTTP/3"); err != nil {
		return err
	}
	x.s.BytesOut += int64(headSize(x.fields))
	x.deadline()
	return x.writeErr(x.st.WriteHeaders(x.qpackFields(x.fields), false))
}

// qpackFields returns fields as QPACK's.
func (x *h3exchange) qpackFields(fields []hpack.HeaderField) []qpack.HeaderField {
	x.qfields = x.qfields[:0]
	for _, f := range fields {
		x.qfields = append(x.qfields, qpack.HeaderField{Name: f.Name, Value: f.Value})
	}
	return x.qfields
}

func (x *h3exchange) takesChunked() bool { return false }

// deadline bounds the next write by the send timeout.
func (x *h3exchange) deadline() {
	x.st.SetWriteDeadline(time.Now().Add(x.s.srv.sendTimeout()))
}

func (x *h3exchange) send(p []byte, end bool, trailers *h1.Header) error {
	if x.severed.Load() {
		return errH3StreamCut
	}
	if end {
		x.fin.Store(true)
	}
	x.deadline()
	return x.write(h3wire{x}, &x.s.BytesOut, p, end, trailers)
}

// h3wire is an HTTP/3 stream as an answerWire: the fields go as QPACK's.
type h3wire struct{ x *h3exchange }

func (w h3wire) writeHead(fields []hpack.HeaderField, body []byte, end bool) error {
	return w.x.st.WriteResponse(w.x.qpackFields(fields), body, end)
}

func (w h3wire) Write(body []byte) (int, error) { return w.x.st.Write(body) }

func (w h3wire) End() error { return w.x.st.End() }

func (w h3wire) writeTrailers(fields []hpack.HeaderField) error {
	return w.x.st.WriteHeaders(w.x.qpackFields(fields), true)
}

var errH3StreamCut = errors.New("proxy: the HTTP/3 stream was reset")

func (x *h3exchange) sendFile(fb *FileBody) error {
	return copyFile(fb, func(p []byte) error { return x.send(p, false, nil) })
}

func (x *h3exchange) tunnel(*h1.Response, net.Conn, []byte) error {
	return errors.New("proxy: 101 Switching Protocols cannot go to an HTTP/3 client")
}

func (x *h3exchange) abort() {
	if x.severed.CompareAndSwap(false, true) {
		x.st.Reset(h3.ErrInternal)
	}
}

func (x *h3exchange) gone() bool {
	if x.ended {
		return false
	}
	select {
	case <-x.st.Done():
		return !x.fin.Load()
	default:
		return false
	}
}
