package proxy

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/clock"
	"github.com/sluice-proxy/sluice/pool"
)

// h1up is a try on a pooled HTTP/1.1 connection: the request goes as
// HTTP/1.1 bytes, a body passed through as the client framed it where
// the framing allows (byte for byte, chunk extensions included), and the
// response is parsed off the wire. A Session holds one, for its tries in
// turn.
type h1up struct {
	pc   *pool.Conn
	pool *pool.Pool
	opts *PeerOptions
	wbuf *[]byte // the Session's write buffer, for the head and a body sent with it
	// chunk is set when the writer frames the request body itself (a body
	// of unknown length that came as data: from HTTP/2, say).
	chunk bool
	cbuf  []byte // the pump's, for a chunk it frames

	readStart  int64 // the reader's count when the response began
	maxHeaders int
	method     string
	resp       *h1.Response // the final head, once read
	frame      h1.Framing
	reusable   bool
	rbody      h1Body
}

// h1Body is an HTTP/1.1 body read off a Reader (a client's request body,
// an upstream's response body).
type h1Body struct {
	b h1.Body
	r *h1.Reader
	// early is what a read ahead found (a reset), for next to return
	// where it would read: the socket may not say it twice.
	early error
}

func (b *h1Body) next() ([]byte, error) {
	if b.early != nil && b.r.Buffered() == 0 && !b.b.Done() {
		return nil, b.early
	}
	return b.b.Next()
}

func (b *h1Body) data() bool               { return b.b.Data() }
func (b *h1Body) ready() bool              { return b.b.Ready() }
func (b *h1Body) done() bool               { return b.b.Done() }
func (b *h1Body) buffered() int            { return b.r.Buffered() }
func (b *h1Body) addTrailers(h *h1.Header) { b.b.AddTrailers(h) }

// use readies u for a try on pc.
func (u *h1up) use(pc *pool.Conn, s *Session, opts *PeerOptions) {
	*u = h1up{pc: pc, pool: s.srv.Pool, opts: opts, wbuf: s.wbuf, maxHeaders: s.srv.maxHeaders(),
		method: s.Request.Method(), rbody: h1Body{b: u.rbody.b}, cbuf: u.cbuf[:0]}
}

func (u *h1up) send(req *h1.Request, f h1.Framing, framed bool, first []byte, end bool, trailers *h1.Header) (int64, error) {
	pc := u.pc
	h := &req.Header
	switch {
	case f.Kind == h1.Chunked && !framed:
		// A body of unknown length that came as data: HTTP/1.1 carries it
		// chunked, framed here.
		u.chunk = true
		if !h.Has("Transfer-Encoding") {
			h.Add("Transfer-Encoding", "chunked")
		}
	case f.Kind == h1.Length && !h.Has("Content-Length"):
		h.Add("Content-Length", strconv.FormatInt(f.Length, 10))
	}
	w := h1.AppendRequest((*u.wbuf)[:0], req)
	w = u.appendBody(w, first, !framed)
	if end && u.chunk {
		w = appendLastChunk(w, trailers)
	}
	*u.wbuf = w[:0]
	now := clock.Now()
	var n int
	var err error
	if end {
		// The whole request goes in this write; Send then waits for the
		// answer within the response-header timeout.
		t := u.opts.responseHeaderTimeout()
		pc.ReadDeadlineWithin(now.Add(t), deadlineSlack(t))
		n, err = pc.Send(w, u.opts.writeTimeout())
	} else {
		pc.SetWriteDeadline(now.Add(u.opts.writeTimeout()))
		n, err = pc.Write(w)
		// The response may come while the body still flows: no read
		// deadline until the pump sets the response-header timeout at
		// the body's end, and none left from this connection's last
		// request.
		pc.SetReadDeadline(time.Time{})
	}
	return int64(n), err
}

// appendBody appends a segment of the request body to w, framed as a
// chunk when the writer frames the body (data only, then: framing is
// dropped).
func (u *h1up) appendBody(w, seg []byte, data bool) []byte {
	if !u.chunk {
		return append(w, seg...)
	}
	if !data || len(seg) == 0 {
		return w
	}
	w = strconv.AppendInt(w, int64(len(seg)), 16)
	w = append(w, "\r\n"...)
	w = append(w, seg...)
	return append(w, "\r\n"...)
}

// appendLastChunk appends the last chunk of a chunked body, with its
// trailers (nil: none).
func appendLastChunk(w []byte, trailers *h1.Header) []byte {
	w = append(w, "0\r\n"...)
	if trailers != nil {
		w = trailers.AppendTo(w)
	}
	return append(w, "\r\n"...)
}

func (u *h1up) body(seg []byte, data bool) (int, error) {
	if !u.chunk {
		return u.pc.Write(seg)
	}
	if !data || len(seg) == 0 {
		return 0, nil
	}
	if len(seg) <= maxCopied {
		u.cbuf = u.appendBody(u.cbuf[:0], seg, true)
		return u.pc.Write(u.cbuf)
	}
	var size [18]byte
	line := append(strconv.AppendInt(size[:0], int64(len(seg)), 16), "\r\n"...)
	bufs := net.Buffers{line, seg, crlf}
	n, err := bufs.WriteTo(u.pc.Conn)
	return int(n), err
}

var crlf = []byte("\r\n")

func (u *h1up) end(seg []byte, data bool, trailers *h1.Header) (int, error) {
	if !u.chunk {
		if len(seg) == 0 {
			return 0, nil
		}
		return u.pc.Write(seg)
	}
	u.cbuf = appendLastChunk(u.appendBody(u.cbuf[:0], seg, data), trailers)
	return u.pc.Write(u.cbuf)
}

func (u *h1up) setWriteDeadline(t time.Time) { u.pc.SetWriteDeadline(t) }
func (u *h1up) setReadDeadline(t time.Time)  { u.pc.SetReadDeadline(t) }

func (u *h1up) head(resp *h1.Response) error {
	pc := u.pc
	if u.resp == nil {
		u.readStart = pc.Reader.N
	}
	head, err := pc.Reader.ReadHead(maxResponseHead, false)
	if err != nil {
		return err
	}
	if err := h1.ParseResponse(resp, head, u.maxHeaders); err != nil {
		return &fault.Error{Kind: fault.InvalidResponse, Source: fault.Upstream, Context: "parsing the response head", Cause: err}
	}
	if resp.Status < 200 {
		return nil
	}
	f, reusable, err := h1.ResponseFraming(u.method, resp)
	if err != nil {
		return &fault.Error{Kind: fault.InvalidResponse, Source: fault.Upstream, Context: "framing the response", Cause: err}
	}
	if f.Kind != h1.Length && resp.Header.Has("Transfer-Encoding") {
		// RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and
		// an intermediary that forwards such a message removes the
		// Content-Length first, so that nothing after sluice sees both.
		// (ResponseFraming already keeps the connection out of the pool.)
		resp.Header.Del("Content-Length")
	}
	u.resp, u.frame = resp, f
	keep, closing := h1.KeepAliveClose(resp.Minor, &resp.Header)
	u.reusable = reusable && keep
	u.learnKeepAlive(&resp.Header)
	if closing {
		// The upstream is closing this connection, often because the
		// process behind it is going away (gunicorn's max_requests);
		// its other pooled connections may follow.
		u.pool.MarkClosing(pc.Key)
	}
	return nil
}

func (u *h1up) read() int64 { return u.pc.Reader.N - u.readStart }

func (u *h1up) out() (outBody, bool) {
	switch f := u.frame; {
	case f.Empty():
		return outBody{length: 0, none: true}, u.reusable
	case f.Kind == h1.Length:
		return outBody{length: f.Length}, u.reusable
	case f.Kind == h1.Chunked:
		return outBody{length: -1, chunked: true}, u.reusable
	}
	return outBody{length: -1, untilClose: true}, u.reusable
}

func (u *h1up) response(decode bool, timeout time.Duration) bodyReader {
	r := &u.pc.Reader
	r.SetReadTimeout(timeout)
	f := u.frame
	full := r.Full()
	switch {
	case f.Kind == h1.UntilClose || f.Kind == h1.Chunked:
		r.Grow(largeBuffer)
	case f.Kind == h1.Length && f.Length > smallBody:
		// A larger body moves in reads and writes of up to 64 KiB, not
		// 4 KiB: a body of up to 64 KiB in one of each.
		r.Grow(int(min(largeBuffer, f.Length+int64(r.Buffered()))))
	}
	u.rbody.r, u.rbody.early = r, nil
	u.rbody.b.Init(r, f, decode, maxResponseHead)
	if rest := f.Length - int64(r.Buffered()); full && f.Kind == h1.Length && rest > 0 && rest <= maxCopied {
		// The read of the head filled the buffer, so the rest of a body
		// that came whole is likely in the socket already: take what is
		// there, without waiting, so that head and body leave in one
		// write instead of two. (An end of stream is left for the next
		// read, which sees it again; a reset is not, and is kept.)
		if _, err := r.FillWith(u.pc.Now(), int(f.Length)); err != nil && err != pool.ErrNothingYet && err != io.EOF {
			u.rbody.early = err
		}
	}
	return &u.rbody
}

func (u *h1up) finish(keep bool) {
	pc := u.pc
	pc.Served++
	if keep {
		u.pool.Put(pc)
		return
	}
	pc.Reader.Release()
	pc.Close()
}

func (u *h1up) drop() {
	u.pc.Reader.Release() // the read buffer back to the pool, unless bytes were left unread
	u.pc.Close()
}

func (u *h1up) died() { u.pool.Dead(u.pc) }

func (u *h1up) cut(t time.Time) { u.pc.SetDeadline(t) }

func (u *h1up) abandon() { u.pc.SetDeadline(time.Now().Add(cancelGrace)) }

func (u *h1up) hijack() (net.Conn, []byte) {
	b := u.pc.Reader.Peek()
	u.pc.Reader.Discard(len(b))
	return u.pc.Conn, b
}

// learnKeepAlive hands the limits an upstream announces for its connection
// (Keep-Alive: timeout=N, max=M) to the pool, so that it retires the
// connection before the upstream would close it.
func (u *h1up) learnKeepAlive(h *h1.Header) {
	v := h.Get("Keep-Alive")
	if v == nil {
		return
	}
	idle, remaining := parseKeepAlive(v)
	if idle >= 0 {
		u.pc.IdleLimit = max(idle, time.Millisecond)
	}
	if remaining >= 0 {
		// max counts the requests the upstream will still take on this
		// connection after this one (Apache's convention); Served does
		// not count this one yet.
		u.pc.MaxServed = u.pc.Served + 1 + remaining
	}
}

// parseKeepAlive reads a Keep-Alive field value ("timeout=5, max=100").
// It returns how long the connection may stay idle, a safety margin before
// the announced timeout (one second, or half the timeout when that is two
// seconds or less, so a request never leaves on a connection the upstream
// is closing at that moment), and how many more requests it takes; -1 for
// what is not announced or not a plain number.
func parseKeepAlive(v []byte) (idle time.Duration, remaining int) {
	idle, remaining = -1, -1
	for len(v) > 0 {
		var item []byte
		item, v = h1.CutList(v)
		name, val, ok := bytes.Cut(item, []byte{'='})
		if !ok {
			continue
		}
		n, ok := h1.ParseDecimal(bytes.Trim(bytes.TrimSpace(val), `"`))
		if !ok || n > maxKeepAliveNumber {
			continue
		}
		switch {
		case h1.EqualFold(bytes.TrimSpace(name), "timeout"):
			t := time.Duration(n) * time.Second
			margin := time.Second
			if t <= 2*time.Second {
				margin = t / 2
			}
			idle = t - margin
		case h1.EqualFold(bytes.TrimSpace(name), "max"):
			remaining = int(n)
		}
	}
	return idle, remaining
}

// maxKeepAliveNumber bounds the numbers taken from Keep-Alive: a timeout
// of more seconds would overflow a time.Duration, and such limits mean
// none.
const maxKeepAliveNumber = 999_999_999

// maxResponseHead bounds an upstream response head.
const maxResponseHead = 64 << 10

// A response body over smallBody bytes (or of unknown length) is read with
// a buffer of up to largeBuffer bytes.
const (
	smallBody   = 2 << 10
	largeBuffer = 64 << 10
)
