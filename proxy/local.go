package proxy

import (
	"io"
	"net"
	"strconv"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// localUp is a Response that stands in for an upstream's
// (Response.AsUpstream) as a try's upstream side: the main line relays it
// as it relays a server's answer, through the response phases, to any
// downstream. Nothing of the request is sent anywhere.
type localUp struct {
	r      *Response
	method string
	rbody  localBody
}

// localPeer is the peer of a Response that stands in for an upstream's, in
// the errors of its relay.
var localPeer = &Peer{Addr: "sluice"}

// serveLocal relays r as an upstream's response.
func (s *Session) serveLocal(r *Response) {
	u := &s.local
	*u = localUp{r: r, method: s.Request.Method(), rbody: localBody{buf: u.rbody.buf}}
	u.rbody.r = r
	s.setUp(u)
	u.head(&s.resp)
	var a Attempt // not a try: the access log lists none
	s.relay(localPeer, &a)
}

func (u *localUp) send(*h1.Request, h1.Framing, bool, []byte, bool, *h1.Header) (int64, error) {
	return 0, nil
}
func (u *localUp) body([]byte, bool) (int, error)            { return 0, nil }
func (u *localUp) end([]byte, bool, *h1.Header) (int, error) { return 0, nil }
func (u *localUp) setWriteDeadline(time.Time)                {}
func (u *localUp) setReadDeadline(time.Time)                 {}

// head gives the response's head as an upstream's: its status, its
// fields as they are, and Content-Length from its body when known.
func (u *localUp) head(resp *h1.Response) error {
	r := u.r
	resp.Reset()
	resp.Status, resp.Minor = r.Status, 1
	// The fields first: CopyFrom replaces the header's storage, which
	// holds the reason phrase too.
	resp.Header.CopyFrom(&r.Header)
	if r.Reason != "" {
		resp.SetReason(r.Reason)
	} else {
		resp.SetReason(h1.StatusText(r.Status))
	}
	if n := r.bodySize(); n >= 0 && !u.bodiless() && !resp.Header.Has("Content-Length") && r.Trailers.Len() == 0 {
		var b [20]byte
		resp.Header.AddBytes(contentLength, strconv.AppendInt(b[:0], n, 10))
	}
	return nil
}

// bodiless reports whether the response has no body by its status or
// the request's method.
func (u *localUp) bodiless() bool {
	st := u.r.Status
	return u.method == "HEAD" || st == 204 || st == 304 || st < 200
}

func (u *localUp) read() int64 { return u.rbody.n }

func (u *localUp) out() (outBody, bool) {
	if u.bodiless() {
		return outBody{length: 0, none: true}, true
	}
	n := u.r.bodySize()
	if u.r.Trailers.Len() > 0 {
		n = -1 // the body goes framed, for its trailers to follow
	}
	return outBody{length: n}, true
}

func (u *localUp) response(bool, time.Duration) bodyReader {
	u.rbody.start(u.bodiless())
	return &u.rbody
}

func (u *localUp) finish(bool) { u.r.close() }
func (u *localUp) drop()       { u.r.close() }
func (u *localUp) died()       {}
func (u *localUp) cut(time.Time) {
	if d, ok := u.rbody.stream().(interface{ SetReadDeadline(time.Time) error }); ok {
		d.SetReadDeadline(time.Now())
	}
}
func (u *localUp) abandon()                   { u.cut(time.Now()) }
func (u *localUp) hijack() (net.Conn, []byte) { return nil, nil }

// localBody reads a Response's body: its bytes, its file or its stream.
type localBody struct {
	r     *Response
	buf   []byte // for a file's or a stream's pieces
	off   int64  // of a file: the next byte's offset from its start
	n     int64  // bytes returned
	ended bool
}

// localBuf is the size of the pieces a file or stream body is read in.
const localBuf = 32 << 10

func (b *localBody) start(bodiless bool) {
	b.off, b.n, b.ended = 0, 0, bodiless
	if !bodiless && b.r.File == nil && b.r.Stream == nil && len(b.r.Body) == 0 {
		b.ended = true
	}
}

func (b *localBody) stream() io.Reader {
	if b.r.Stream == nil {
		return nil
	}
	return b.r.Stream.Reader
}

func (b *localBody) next() ([]byte, error) {
	if b.ended {
		return nil, io.EOF
	}
	r := b.r
	if r.File == nil && r.Stream == nil {
		b.ended = true
		b.n = int64(len(r.Body))
		return r.Body, io.EOF
	}
	if b.buf == nil {
		b.buf = make([]byte, localBuf)
	}
	var n int
	var err error
	size := r.bodySize()
	if r.File != nil {
		n, err = r.File.File.ReadAt(b.buf[:min(int64(len(b.buf)), size-b.off)], r.File.Offset+b.off)
		b.off += int64(n)
		if b.off == size {
			err = io.EOF
		} else if err == io.EOF {
			err = &fileError{nil}
		}
	} else {
		want := len(b.buf)
		if size >= 0 {
			want = int(min(int64(want), size-b.n))
		}
		n, err = r.Stream.Reader.Read(b.buf[:want])
		switch {
		case size >= 0 && b.n+int64(n) == size:
			err = io.EOF
		case size >= 0 && err == io.EOF:
			err = io.ErrUnexpectedEOF // shorter than it said: cut, never whole
		}
	}
	b.n += int64(n)
	if err == io.EOF {
		b.ended = true
	}
	return b.buf[:n], err
}

func (b *localBody) data() bool { return true }

// ready is true for bytes in memory and a file (whose reads do not wait
// for anyone); a stream's next piece may have to be waited for.
func (b *localBody) ready() bool { return b.ended || b.r.Stream == nil }
func (b *localBody) done() bool  { return b.ended }

func (b *localBody) buffered() int {
	if b.ended || b.r.Stream != nil {
		return 0
	}
	if b.r.File != nil {
		return int(min(int64(localBuf), b.r.File.Size-b.off))
	}
	return len(b.r.Body)
}

func (b *localBody) addTrailers(h *h1.Header) {
	t := &b.r.Trailers
	for i := 0; i < t.Len(); i++ {
		h.AddBytes(t.Name(i), t.Value(i))
	}
}
