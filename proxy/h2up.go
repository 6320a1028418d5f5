package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/h2"
	"github.com/sluice-proxy/sluice/internal/clock"
)

// h2up is a try on a stream of an HTTP/2 connection to the server: the
// request head becomes the stream's header block, its body DATA and
// trailers, and the response's header blocks become response heads
// directly, never HTTP/1.1 text. What HTTP/2 says of a refused stream
// comes back as fault.Refused, which the retry decision knows was not
// processed. A Session holds one, for its tries in turn.
type h2up struct {
	mc     *muxConn
	opts   *PeerOptions
	scheme string
	method string
	fields []hpack.HeaderField // the request's, reused
	seen   *interned           // the strings of field values lately sent

	// mu guards cs, rdl and wdl, which the drain timeout and a client's
	// reset set from other goroutines (cut).
	mu       sync.Mutex
	cs       *h2.ClientStream
	rdl, wdl time.Time
	// limit bounds every deadline: the call's grpc-timeout (zero: none).
	limit time.Time

	got     int64 // response bytes: fields' and DATA's
	length  int64 // the final response's content-length, -1 when absent
	none    bool  // it has no body: HEAD, 204, 304
	empty   bool  // it ended with its head
	rbody   h2Body
	timeout time.Duration
}

// use readies u for a try on mc, within limit (zero: none).
func (u *h2up) use(mc *muxConn, tls bool, s *Session, opts *PeerOptions, limit time.Time) {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	buf, seen := u.rbody.buf, u.seen
	if seen == nil {
		seen = new(interned)
	}
	*u = h2up{mc: mc, opts: opts, scheme: scheme, method: s.Request.Method(), fields: u.fields[:0], seen: seen, limit: limit, length: -1}
	u.rbody = h2Body{u: u, buf: buf}
}

// bounded returns deadline t within the call's limit.
func (u *h2up) bounded(t time.Time) time.Time {
	if !u.limit.IsZero() && (t.IsZero() || t.After(u.limit)) {
		return u.limit
	}
	return t
}

func (u *h2up) send(req *h1.Request, f h1.Framing, framed bool, first []byte, end bool, trailers *h1.Header) (int64, error) {
	h := &req.Header
	fields := append(u.fields[:0],
		hpack.HeaderField{Name: ":method", Value: u.method},
		hpack.HeaderField{Name: ":scheme", Value: u.scheme},
		hpack.HeaderField{Name: ":authority", Value: u.seen.of(h.Get("Host"))},
		hpack.HeaderField{Name: ":path", Value: u.seen.of(req.Target())})
	for i := 0; i < h.Len(); i++ {
		name := lowerName(h.Name(i))
		switch {
		case name == "host" || isConnectionField(name):
			continue
		case name == "te" && !h1.EqualFold(bytes.TrimSpace(h.Value(i)), "trailers"):
			continue
		}
		fields = append(fields, headerField(name, u.seen.of(h.Value(i))))
	}
	u.fields = fields
	if framed && len(first) > 0 {
		// A body the client chunked, kept for a resend as it came: HTTP/2
		// takes its data.
		first = chunkedData(first)
	}
	last := end && (trailers == nil || trailers.Len() == 0)
	now := clock.Now()
	u.mu.Lock()
	u.wdl = u.bounded(now.Add(u.opts.writeTimeout()))
	if end {
		u.rdl = u.bounded(now.Add(u.opts.responseHeaderTimeout()))
	} else {
		// The response may come while the body still flows: no read
		// deadline but the call's, until the pump sets the
		// response-header timeout at the body's end.
		u.rdl = u.bounded(time.Time{})
	}
	u.mu.Unlock()
	cs, sent, err := u.mc.cc.OpenStreamBody(fields, first, last)
	if err != nil {
		return 0, upstreamErr(err)
	}
	u.mu.Lock()
	u.cs = cs
	cs.SetReadDeadline(u.rdl)
	cs.SetWriteDeadline(u.wdl)
	u.mu.Unlock()
	n := int64(headSize(fields)) + int64(sent)
	if rest := first[sent:]; len(rest) > 0 {
		var m int
		if last {
			m, err = cs.WriteLast(rest)
		} else {
			m, err = cs.Write(rest)
		}
		n += int64(m)
		if err != nil {
			return n, upstreamErr(err)
		}
	}
	if end && !last {
		if err := cs.WriteTrailers(appendHeader(u.fields[len(fields):], trailers, u.seen)); err != nil {
			return n, upstreamErr(err)
		}
	}
	return n, nil
}

// headSize is what a header block counts for: its fields' sizes.
func headSize(fields []hpack.HeaderField) int {
	n := 0
	for _, f := range fields {
		n += len(f.Name) + len(f.Value)
	}
	return n
}

// chunkedData returns the data of a chunked body's start as it came (framing
// checked already; a chunk begun and not ended gives what came of it).
func chunkedData(b []byte) []byte {
	var r h1.Reader
	r.Reset(bytes.NewReader(b))
	var body h1.Body
	body.Init(&r, h1.Framing{Kind: h1.Chunked}, true, len(b))
	var data []byte
	for {
		seg, err := body.Next()
		data = append(data, seg...)
		if err != nil {
			return data
		}
	}
}

func (u *h2up) body(seg []byte, data bool) (int, error) {
	if !data || len(seg) == 0 {
		return 0, nil
	}
	n, err := u.cs.Write(seg)
	return n, upstreamErr(err)
}

func (u *h2up) end(seg []byte, data bool, trailers *h1.Header) (int, error) {
	if !data {
		seg = nil
	}
	if trailers == nil || trailers.Len() == 0 {
		n, err := u.cs.WriteLast(seg)
		return n, upstreamErr(err)
	}
	n := 0
	if len(seg) > 0 {
		var err error
		if n, err = u.cs.Write(seg); err != nil {
			return n, upstreamErr(err)
		}
	}
	return n, upstreamErr(u.cs.WriteTrailers(appendHeader(u.fields[len(u.fields):], trailers, u.seen)))
}

func (u *h2up) setWriteDeadline(t time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.wdl = u.bounded(t)
	if u.cs != nil {
		u.cs.SetWriteDeadline(u.wdl)
	}
}

func (u *h2up) setReadDeadline(t time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rdl = u.bounded(t)
	if u.cs != nil {
		u.cs.SetReadDeadline(u.rdl)
	}
}

// head reads the next response header block as a response head: :status
// the status, the fields as they came (lowercase, as HTTP/2 has them).
func (u *h2up) head(resp *h1.Response) error {
	fields, err := u.cs.ReadHeader()
	if err != nil {
		return upstreamErr(err)
	}
	resp.Reset()
	resp.Minor = 1
	u.got += int64(headSize(fields))
	hasLength := false
	for _, f := range fields {
		if f.Name == ":status" {
			resp.Status, _ = strconv.Atoi(f.Value)
			continue
		}
		if strings.HasPrefix(f.Name, ":") {
			continue
		}
		if f.Name == "content-length" {
			hasLength = true
			if n, ok := h1.ParseDecimal([]byte(f.Value)); ok {
				u.length = n
			}
		}
		resp.Header.Add(f.Name, f.Value)
	}
	resp.SetReason(h1.StatusText(resp.Status))
	if resp.Status < 200 {
		u.length = -1
		return nil
	}
	u.none = u.method == "HEAD" || resp.Status == 204 || resp.Status == 304
	if u.cs.Empty() {
		// The response ended with its header block (gRPC's trailers-only
		// answer): no body, and the client's side ends it the same way,
		// saying so where its length would not be known.
		u.empty = true
		if !hasLength && !u.none {
			u.length = 0
		}
	}
	return nil
}

func (u *h2up) read() int64 { return u.got }

func (u *h2up) out() (outBody, bool) { return outBody{length: u.length, none: u.none}, true }

func (u *h2up) response(_ bool, timeout time.Duration) bodyReader {
	u.timeout = timeout
	u.rbody.ended = u.none || u.empty
	return &u.rbody
}

// finish ends a stream whose response ended: one whose request did not
// (the server answered without reading the whole body) is cancelled, so
// that it does not hold a place on the connection (release).
func (u *h2up) finish(bool) { u.release() }

// drop cancels a stream whose response did not end (release). The
// connection stays, for other streams.
func (u *h2up) drop() { u.release() }

// release ends the try's use of its stream, if it opened one: a stream
// still open either way is reset with CANCEL, and the stream is reused for
// a later request (h2.ClientStream.Release). Both finish and drop come
// after the request body's pump has stopped (reqBody.stop) and after the
// flight let go of u (setUp(nil)), and u.cs goes nil under mu, so that a
// cut (the drain timeout, a client's reset) finds no stream: nothing of
// this try reaches the stream after. What the Session keeps of the
// response was copied out before: the heads' and trailers' fields into
// its h1 headers (head, addTrailers), the body into rbody's buffer.
func (u *h2up) release() {
	u.mu.Lock()
	cs := u.cs
	u.cs = nil
	u.mu.Unlock()
	if cs != nil {
		cs.Release()
	}
}

func (u *h2up) died() {}

func (u *h2up) cut(t time.Time) {
	u.setReadDeadline(t)
	u.setWriteDeadline(t)
}

func (u *h2up) abandon() { u.cut(time.Now()) }

func (u *h2up) hijack() (net.Conn, []byte) { return nil, nil }

// h2Body is an HTTP/2 response body: the stream's DATA, read into a buffer
// of its own, then its trailers.
type h2Body struct {
	u     *h2up
	buf   []byte
	ended bool
}

// h2BodyBuf is the size of an h2Body's buffer: a DATA frame's default
// largest payload.
const h2BodyBuf = 16 << 10

func (b *h2Body) next() ([]byte, error) {
	if b.ended {
		return nil, io.EOF
	}
	if b.buf == nil {
		b.buf = make([]byte, h2BodyBuf)
	}
	cs := b.u.cs
	if !b.ready() {
		b.u.setReadDeadline(time.Now().Add(b.u.timeout))
	}
	n, err := cs.Read(b.buf)
	b.u.got += int64(n)
	if err == nil {
		// The end, when it came with these bytes, goes with them.
		if left, ended := cs.Arrived(); left == 0 && ended {
			err = io.EOF
		}
	}
	if err == io.EOF {
		b.ended = true
		return b.buf[:n], io.EOF
	}
	return b.buf[:n], upstreamErr(err)
}

func (b *h2Body) data() bool { return true }

func (b *h2Body) ready() bool {
	if b.ended {
		return true
	}
	n, ended := b.u.cs.Arrived()
	return n > 0 || ended
}

func (b *h2Body) done() bool { return b.ended }

func (b *h2Body) buffered() int {
	if b.ended {
		return 0
	}
	n, _ := b.u.cs.Arrived()
	return n
}

func (b *h2Body) addTrailers(h *h1.Header) {
	for _, f := range b.u.cs.Trailers() {
		h.Add(f.Name, f.Value)
	}
}

// upstreamErr turns what HTTP/2 says of a failed stream into what the
// retry decision reads: a stream the server refused, or left out of a
// GOAWAY, was not processed (fault.Refused); anything else passes as it
// is, to be classified as a failure of the connection.
func upstreamErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, h2.ErrInvalidRequest) {
		// Nothing was sent, and nothing would be elsewhere: the request
		// cannot go over HTTP/2 as it is (a field HTTP/2 forbids, a
		// header list over the server's limit).
		return &fault.Error{Kind: fault.Internal, Source: fault.Internally,
			Context: "the request cannot be sent over HTTP/2", Cause: err}
	}
	if h2.NotProcessed(err) {
		return &fault.Error{Kind: fault.Refused, Source: fault.Upstream,
			Context: "the upstream refused the stream before processing it", Cause: err}
	}
	var re *h2.ResetError
	if errors.As(err, &re) {
		return &fault.Error{Kind: fault.ConnectionReset, Source: fault.Upstream,
			Context: "the upstream reset the stream (" + re.Code.String() + ")", Cause: err}
	}
	return err
}
