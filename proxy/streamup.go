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

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/h2"
)

// streamUp is one request's stream to an HTTP/2 upstream seen as the
// connection of one HTTP/1.1 exchange, so that a try runs on it as on an
// HTTP/1.1 connection (the mirror of streamConn): Write takes the HTTP/1.1
// request the Session writes (head, then the body in its framing) and
// sends HEADERS, DATA and trailers; Read yields the response as HTTP/1.1
// (a status line and fields, then the body: as it came with a
// content-length, else chunked, trailers in the last chunk). What HTTP/2
// says of a refused stream comes back as fault.Refused, which the retry
// decision knows was not processed.
type streamUp struct {
	mc  *muxConn
	tls bool // the scheme is https
	cs  *h2.ClientStream

	// The request: its head until whole, then how its body is framed.
	head    []byte
	method  string
	req     h1.Request
	left    int64 // Content-Length bytes still to come
	chunked bool
	chunk   chunkDec
	pay     []byte // the data of one Write's chunks
	sent    bool   // the request ended (END_STREAM)

	// The response: what is ready to be read, and how the body goes on.
	out   []byte
	final bool // the final response head was read
	raw   bool // the body goes as it comes (content-length, or none)
	ended bool // the body and its framing were all read
	// mu guards cs, rdl and wdl, which the drain timeout and a client's
	// reset set from other goroutines (SetDeadline).
	mu       sync.Mutex
	rdl, wdl time.Time
	// limit bounds every deadline: the call's grpc-timeout (zero: none).
	limit time.Time
}

func newStreamUp(mc *muxConn, tls bool, limit time.Time) *streamUp {
	return &streamUp{mc: mc, tls: tls, limit: limit}
}

// bounded returns deadline t within the call's limit.
func (u *streamUp) bounded(t time.Time) time.Time {
	if !u.limit.IsZero() && (t.IsZero() || t.After(u.limit)) {
		return u.limit
	}
	return t
}

var _ net.Conn = (*streamUp)(nil)

// Write takes bytes of the HTTP/1.1 request.
func (u *streamUp) Write(b []byte) (int, error) {
	n := len(b)
	if u.cs == nil {
		u.head = append(u.head, b...)
		i := bytes.Index(u.head, []byte("\r\n\r\n"))
		if i < 0 {
			return n, nil
		}
		b = u.head[i+4:]
		sent, err := u.open(u.head[:i+4], b)
		if err != nil {
			return 0, err
		}
		b = b[sent:]
	}
	if err := u.body(b); err != nil {
		return 0, err
	}
	return n, nil
}

// open sends the request head as a header block on a new stream, and with
// it what it can of the body that came in the same Write, rest (a body
// with a Content-Length: in the same write to the connection, END_STREAM
// on its last frame when it is whole). It returns how much of rest went.
func (u *streamUp) open(head, rest []byte) (int, error) {
	if err := h1.ParseRequest(&u.req, head, 10000); err != nil {
		return 0, err
	}
	f, err := h1.ValidateRequest(&u.req)
	if err != nil {
		return 0, err
	}
	u.method = u.req.Method()
	scheme := "http"
	if u.tls {
		scheme = "https"
	}
	h := &u.req.Header
	fields := make([]hpack.HeaderField, 0, 4+h.Len())
	fields = append(fields, hpack.HeaderField{Name: ":method", Value: u.method}, hpack.HeaderField{Name: ":scheme", Value: scheme},
		hpack.HeaderField{Name: ":authority", Value: string(h.Get("Host"))}, hpack.HeaderField{Name: ":path", Value: string(u.req.Target())})
	for i := 0; i < h.Len(); i++ {
		name := lowerName(h.Name(i))
		switch {
		case name == "host" || isConnectionField(name):
			continue
		case name == "te" && !h1.EqualFold(bytes.TrimSpace(h.Value(i)), "trailers"):
			continue
		}
		fields = append(fields, headerField(name, string(h.Value(i))))
	}
	end := f.Empty()
	var first []byte
	if f.Kind == h1.Length {
		first = rest[:min(int64(len(rest)), f.Length)]
		end = end || int64(len(first)) == f.Length
	}
	cs, sent, err := u.mc.cc.OpenStreamBody(fields, first, end)
	if err != nil {
		return 0, upstreamErr(err)
	}
	u.mu.Lock()
	u.cs = cs
	cs.SetReadDeadline(u.rdl)
	cs.SetWriteDeadline(u.wdl)
	u.mu.Unlock()
	switch f.Kind {
	case h1.Length:
		u.left = f.Length - int64(sent)
	case h1.Chunked:
		u.chunked = true
	}
	u.sent = end && sent == len(first)
	return sent, nil
}

// body sends request body bytes, as DATA, in the framing its head gave.
func (u *streamUp) body(b []byte) error {
	if u.sent || len(b) == 0 {
		return nil
	}
	if !u.chunked {
		take := b[:min(int64(len(b)), u.left)]
		u.left -= int64(len(take))
		if u.left > 0 {
			_, err := u.cs.Write(take)
			return upstreamErr(err)
		}
		u.sent = true
		_, err := u.cs.WriteLast(take)
		return upstreamErr(err)
	}
	u.pay = u.pay[:0]
	if _, err := u.chunk.decode(b, u); err != nil {
		return err
	}
	if u.chunk.done && len(u.chunk.trailers) == 0 {
		u.sent = true
		_, err := u.cs.WriteLast(u.pay) // END_STREAM on the last DATA
		return upstreamErr(err)
	}
	if len(u.pay) > 0 {
		if _, err := u.cs.Write(u.pay); err != nil {
			return upstreamErr(err)
		}
	}
	if u.chunk.done {
		u.sent = true
		return upstreamErr(u.cs.WriteTrailers(u.chunk.trailers))
	}
	return nil
}

// payload collects the chunk decoder's data.
func (u *streamUp) payload(p []byte) { u.pay = append(u.pay, p...) }

// Read yields the response as HTTP/1.1 bytes.
func (u *streamUp) Read(p []byte) (int, error) {
	for len(u.out) == 0 {
		if u.ended {
			return 0, io.EOF
		}
		if u.cs == nil {
			return 0, errors.New("proxy: reading an HTTP/2 response before its request")
		}
		if !u.final {
			if err := u.readHead(); err != nil {
				return 0, err
			}
			continue
		}
		if u.raw {
			n, err := u.cs.Read(p)
			if err == io.EOF {
				u.ended = true
				if n > 0 {
					return n, nil
				}
				return 0, io.EOF
			}
			return n, upstreamErr(err)
		}
		return u.readChunk(p)
	}
	n := copy(p, u.out)
	u.out = u.out[n:]
	return n, nil
}

// readHead turns the next response header block into an HTTP/1.1 head.
func (u *streamUp) readHead() error {
	fields, err := u.cs.ReadHeader()
	if err != nil {
		return upstreamErr(err)
	}
	status := 0
	b := u.out[:0]
	if cap(b) == 0 {
		b = make([]byte, 0, 256) // most heads fit: one allocation, not one per doubling
	}
	b = append(b, "HTTP/1.1 "...)
	hasLength := false
	for _, f := range fields {
		if f.Name == ":status" {
			status, _ = strconv.Atoi(f.Value)
		}
	}
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, h1.StatusText(status)...)
	b = append(b, "\r\n"...)
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") {
			continue
		}
		if f.Name == "content-length" {
			hasLength = true
		}
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	if status >= 200 {
		u.final = true
		noBody := u.method == "HEAD" || status == 204 || status == 304
		if !noBody && u.cs.Empty() {
			// The response ended with its header block (gRPC's
			// trailers-only answer): no body, and the client's side
			// ends it the same way.
			noBody = true
			if !hasLength {
				b = append(b, "Content-Length: 0\r\n"...)
			}
		}
		u.raw = hasLength || noBody
		if noBody {
			u.ended = true
		}
		if !u.raw {
			b = append(b, "Transfer-Encoding: chunked\r\n"...)
		}
	}
	u.out = append(b, "\r\n"...)
	return nil
}

// readChunk reads body bytes and hands them on as one chunk, and the end
// of the body as the last chunk with the response's trailers.
func (u *streamUp) readChunk(p []byte) (int, error) {
	const line = 10 // 8 hex digits and CRLF
	if len(p) < line+3 {
		var small [64]byte
		n, err := u.readChunk(small[:])
		u.out = append(u.out, small[:n]...)
		if err != nil && len(u.out) == 0 {
			return 0, err
		}
		return u.Read(p)
	}
	n, err := u.cs.Read(p[line : len(p)-2])
	if n > 0 {
		return frameChunk(p, n), nil
	}
	if err == io.EOF {
		u.ended = true
		u.out = appendLastChunk(u.out[:0], u.cs.Trailers())
		return u.Read(p)
	}
	return 0, upstreamErr(err)
}

// frameChunk frames the n data bytes at p[10:] as one chunk at the start
// of p, and returns its length.
func frameChunk(p []byte, n int) int {
	const line = 10
	size := strconv.AppendInt(make([]byte, 0, line), int64(n), 16)
	size = append(size, "\r\n"...)
	at := line - len(size)
	copy(p[at:], size)
	p[line+n], p[line+n+1] = '\r', '\n'
	copy(p, p[at:line+n+2])
	return len(size) + n + 2
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

// Close ends the exchange: a stream whose response did not end is
// cancelled. The connection stays, for other streams.
func (u *streamUp) Close() error {
	if u.cs != nil && !u.ended {
		u.cs.Reset(http2.ErrCodeCancel)
	}
	return nil
}

func (u *streamUp) LocalAddr() net.Addr  { return u.mc.nc.LocalAddr() }
func (u *streamUp) RemoteAddr() net.Addr { return u.mc.nc.RemoteAddr() }

func (u *streamUp) SetDeadline(t time.Time) error {
	u.SetReadDeadline(t)
	return u.SetWriteDeadline(t)
}

func (u *streamUp) SetReadDeadline(t time.Time) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rdl = u.bounded(t)
	if u.cs != nil {
		return u.cs.SetReadDeadline(u.rdl)
	}
	return nil
}

func (u *streamUp) SetWriteDeadline(t time.Time) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.wdl = u.bounded(t)
	if u.cs != nil {
		return u.cs.SetWriteDeadline(u.wdl)
	}
	return nil
}
