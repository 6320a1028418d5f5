package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/h2"
)

// streamConn is an HTTP/2 stream seen as the connection of one HTTP/1.1
// exchange, so that a Session serves it as it serves a request on a
// connection: Read yields the request body (as the client sent it when it
// gave a content-length, else chunked), and Write takes the HTTP/1.1
// response the Session writes (heads, body, framing) and sends it as
// HEADERS, DATA and trailers. Close ends the stream as the response did:
// complete, or cut (RST_STREAM), never a cut that looks complete.
type streamConn struct {
	st     *h2.Stream
	under  net.Conn // the client connection, for its addresses
	method string   // of the request: a HEAD response has no body
	// chunked is set when the body is read chunked (no content-length);
	// pending holds framing bytes not yet read, and eof is set once the
	// stream's body ended.
	chunked bool
	pending []byte
	eof     bool
	whole   bool // the body had all arrived when the stream was served

	out  outState
	head []byte      // a response head begun in an earlier Write
	resp h1.Response // the response head being sent
	// given is the final head the Session made the next Write start
	// with, givenLen bytes of it (see giveHead): it is not parsed back.
	given    *h1.Response
	givenLen int
	fields   []hpack.HeaderField
	last     lastValues // of the last response sent on this streamConn
	left     int64      // Content-Length bytes still to come
	chunk    chunkDec   // the chunked body's decoder
	pay      []byte     // decoded body bytes of one Write (see payload)
	own      []byte
	// cut is set once the stream was reset; the drain timeout may cut it
	// from another goroutine (Server.expireDrain).
	cut atomic.Bool
}

// What the response writer expects next.
type outState uint8

const (
	outHead     outState = iota // a response head (1xx heads come first)
	outLength                   // Content-Length body bytes
	outChunked                  // a chunked body
	outUntilEnd                 // body bytes until Close
	outDone                     // nothing: the response ended
)

var _ net.Conn = (*streamConn)(nil)

// reset readies sc for the stream st of the client connection under,
// keeping its buffers.
func (sc *streamConn) reset(st *h2.Stream, under net.Conn) {
	*sc = streamConn{st: st, under: under, pending: sc.pending[:0], head: sc.head[:0],
		resp: sc.resp, fields: sc.fields[:0], last: sc.last, own: sc.own[:0], chunk: chunkDec{line: sc.chunk.line[:0]}}
	sc.resp.Reset()
	clear(sc.fields[:cap(sc.fields)]) // no strings of the last response kept alive
}

// Read reads the request body.
func (sc *streamConn) Read(p []byte) (int, error) {
	if !sc.chunked {
		n, err := sc.st.Read(p)
		if err == io.EOF {
			sc.eof = true
		}
		return n, err
	}
	if len(sc.pending) > 0 {
		n := copy(p, sc.pending)
		sc.pending = sc.pending[n:]
		return n, nil
	}
	if sc.eof {
		return 0, io.EOF
	}
	// Room for a size line before the data and a CRLF after it.
	const line = 10 // 8 hex digits and CRLF
	if len(p) < line+3 {
		var small [64]byte
		n, err := sc.Read(small[:])
		sc.pending = append(sc.pending, small[:n]...)
		if err != nil && len(sc.pending) == 0 {
			return 0, err
		}
		return sc.Read(p)
	}
	n, err := sc.st.Read(p[line : len(p)-2])
	if n > 0 {
		return frameChunk(p, n), nil
	}
	if err == io.EOF {
		sc.eof = true
		sc.pending = appendLastChunk(sc.pending[:0], sc.st.Trailers())
		return sc.Read(p)
	}
	return 0, err
}

// appendLastChunk appends the last chunk of a chunked body, with the
// request's trailers.
func appendLastChunk(b []byte, trailers []hpack.HeaderField) []byte {
	b = append(b, "0\r\n"...)
	for _, f := range trailers {
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// Write takes bytes of the HTTP/1.1 response and sends what they make.
func (sc *streamConn) Write(b []byte) (int, error) {
	n := len(b)
	if sc.cut.Load() {
		return 0, errStreamCut
	}
	if err := sc.write(b); err != nil {
		return 0, err
	}
	return n, nil
}

var errStreamCut = errors.New("proxy: the HTTP/2 stream was reset")

func (sc *streamConn) write(b []byte) error {
	var fields []hpack.HeaderField // a final head not sent yet
	ended := false
	var trailers []hpack.HeaderField
	for len(b) > 0 && sc.out != outDone {
		switch sc.out {
		case outHead:
			resp := sc.given
			if resp != nil && len(sc.head) == 0 && len(b) >= sc.givenLen {
				b = b[sc.givenLen:]
			} else {
				head, rest, ok := sc.takeHead(b)
				b = rest
				if !ok {
					return nil // the rest of the head comes with the next Write
				}
				resp = &sc.resp
				if err := h1.ParseResponse(resp, head, maxResponseHeaders); err != nil {
					return err
				}
				sc.head = sc.head[:0]
			}
			sc.given = nil
			sc.fields = appendFields(sc.fields[:0], resp, &sc.last)
			if resp.Status < 200 {
				// 100 Continue, 103 Early Hints: a head of its own.
				if resp.Status == 101 {
					return errors.New("proxy: 101 Switching Protocols cannot go to an HTTP/2 client")
				}
				if err := sc.st.WriteHeaders(sc.fields, false); err != nil {
					return err
				}
				continue
			}
			fields = sc.fields
			f, _, err := h1.ResponseFraming(sc.method, resp)
			if err != nil {
				return err
			}
			switch {
			case f.Empty():
				sc.out, ended = outDone, true
			case f.Kind == h1.Length:
				sc.out, sc.left = outLength, f.Length
			case f.Kind == h1.Chunked:
				sc.out = outChunked
				sc.chunk = chunkDec{}
			default:
				sc.out = outUntilEnd
			}
		case outLength:
			take := b[:min(int64(len(b)), sc.left)]
			sc.left -= int64(len(take))
			sc.payload(take)
			b = b[len(take):]
			if sc.left == 0 {
				sc.out, ended = outDone, true
			}
			if len(b) > 0 {
				b = nil // bytes past the length: not the response's
			}
		case outChunked:
			var err error
			b, err = sc.chunk.decode(b, sc)
			if err != nil {
				return err
			}
			if sc.chunk.done {
				sc.out, ended = outDone, true
				trailers = sc.chunk.trailers
			}
		case outUntilEnd:
			sc.payload(b)
			b = nil
		}
	}
	return sc.send(fields, ended, trailers)
}

// giveHead tells the conn c of an HTTP/2 stream that the next Write
// starts with the final response head resp, n bytes as HTTP/1.1 (nil:
// the hint is withdrawn): the stream takes its fields from resp instead of
// parsing those bytes back. It is given just before that Write and
// withdrawn after it, so that no other head is read by it; on any other
// conn it does nothing.
func (c *conn) giveHead(resp *h1.Response, n int) {
	if sc, ok := c.nc.(*streamConn); ok && (resp == nil || resp.Status >= 200) {
		sc.given, sc.givenLen = resp, n
	}
}

// payload collects body bytes of one Write: the first piece as it is, in
// the caller's buffer; a second makes a copy of both, in sc.own, which is
// the only buffer appended to (appending to the caller's could overwrite
// bytes of it not yet decoded).
func (sc *streamConn) payload(p []byte) {
	switch {
	case len(p) == 0:
	case len(sc.pay) == 0:
		sc.pay = p
	case len(sc.own) == 0:
		sc.own = append(append(sc.own, sc.pay...), p...)
		sc.pay = sc.own
	default:
		sc.own = append(sc.own, p...)
		sc.pay = sc.own
	}
}

// send sends what one Write made: the final head if it is new, the body
// bytes, and the end of the stream when the response ended (with
// trailers, if any).
func (sc *streamConn) send(fields []hpack.HeaderField, ended bool, trailers []hpack.HeaderField) error {
	pay := sc.pay
	sc.pay, sc.own = nil, sc.own[:0]
	endData := ended && len(trailers) == 0
	if fields != nil {
		if err := sc.st.WriteResponse(fields, pay, endData); err != nil {
			return err
		}
	} else {
		if len(pay) > 0 {
			if _, err := sc.st.Write(pay); err != nil {
				return err
			}
		}
		if endData {
			if err := sc.st.End(); err != nil {
				return err
			}
		}
	}
	if ended && len(trailers) > 0 {
		return sc.st.WriteTrailers(trailers)
	}
	return nil
}

// takeHead returns a whole response head from what was kept of earlier
// Writes and b, and the bytes after it.
func (sc *streamConn) takeHead(b []byte) (head, rest []byte, ok bool) {
	if len(sc.head) == 0 {
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			return b[:i+4], b[i+4:], true
		}
	}
	had := len(sc.head)
	sc.head = append(sc.head, b...)
	i := bytes.Index(sc.head, []byte("\r\n\r\n"))
	if i < 0 {
		return nil, nil, false
	}
	used := i + 4 - had
	return sc.head[:i+4], b[used:], true
}

// maxResponseHeaders bounds the fields of a head being re-read here: it
// was made by sluice, within its own limits.
const maxResponseHeaders = 1000

// connectionFields are the fields HTTP/2 forbids (RFC 9113 §8.2.2).
var connectionFields = []string{"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}

// appendFields appends the HTTP/2 header block of resp: :status, then its
// fields with lowercase names, without those that are connection-specific.
// Values equal to the last response's (see lastValues) reuse its strings.
func appendFields(dst []hpack.HeaderField, resp *h1.Response, last *lastValues) []hpack.HeaderField {
	dst = append(dst, hpack.HeaderField{Name: ":status", Value: statusText(resp.Status)})
	h := &resp.Header
	for i := 0; i < h.Len(); i++ {
		name := lowerName(h.Name(i))
		if isConnectionField(name) {
			continue
		}
		dst = append(dst, headerField(name, last.value(i, h.Value(i))))
	}
	return dst
}

// lastValues keeps the short values of the last response a streamConn
// sent, by position. Its next response comes more often than not from the
// same upstream, with the same fields in the same order and most values
// unchanged (server, content-type, cache-control): those reuse the strings
// kept instead of each allocating a copy.
type lastValues [16]string

// maxKeptValue bounds a value kept: long ones (cookies, policies) are
// seldom repeated and would hold memory in pooled streamConns.
const maxKeptValue = 64

// value returns b, field i's value, as a string: the one kept for i when
// they are equal.
func (lv *lastValues) value(i int, b []byte) string {
	if i >= len(lv) || len(b) > maxKeptValue {
		return string(b)
	}
	if lv[i] != string(b) { // compared without a copy
		lv[i] = string(b)
	}
	return lv[i]
}

// headerField is the HPACK field of name and value. The request id, a
// value unique to each message, goes as a literal never indexed: in the
// connection's dynamic table it would only push out the entries the next
// messages reuse (server, content-type, a user agent), and adding and
// evicting it costs the encoder on every message.
func headerField(name, value string) hpack.HeaderField {
	return hpack.HeaderField{Name: name, Value: value, Sensitive: name == "x-request-id"}
}

// commonNames are the fields most responses carry, and those most
// requests sent upstream carry: lowerName returns them without allocating.
var commonNames = []string{"content-type", "content-length", "date", "server", "cache-control",
	"etag", "last-modified", "vary", "content-encoding", "location", "set-cookie", "expires",
	"x-content-type-options", "x-frame-options", "strict-transport-security", "accept-ranges", "age",
	"proxy-status", "content-security-policy", "referrer-policy", "access-control-allow-origin",
	"user-agent", "accept", "accept-encoding", "accept-language", "cookie", "authorization", "referer",
	"origin", "if-none-match", "if-modified-since", "x-forwarded-for", "x-forwarded-proto",
	"x-forwarded-host", "x-real-ip", "forwarded", "via", "x-request-id", "te", "grpc-timeout",
	"grpc-encoding", "grpc-accept-encoding", "idempotency-key"}

func isConnectionField(name string) bool {
	for _, c := range connectionFields {
		if name == c {
			return true
		}
	}
	return false
}

// commonByLen holds commonNames by length, for lowerName.
var commonByLen = func() (t [32][]string) {
	for _, n := range commonNames {
		t[len(n)] = append(t[len(n)], n)
	}
	return t
}()

// lowerName returns name in lowercase, as HTTP/2 requires: the common
// names as constants, without allocating; others in one allocation.
func lowerName(name []byte) string {
	if len(name) < len(commonByLen) {
		for _, c := range commonByLen[len(name)] {
			if h1.EqualFold(name, c) {
				return c
			}
		}
	}
	var buf [64]byte
	b := buf[:0]
	if len(name) > len(buf) {
		b = make([]byte, 0, len(name))
	}
	for _, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b)
}

func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 204:
		return "204"
	case 304:
		return "304"
	case 404:
		return "404"
	}
	return strconv.Itoa(code)
}

// Close ends the stream. A response that ended was sent whole; one whose
// body runs until the connection closes ends here; any other is cut with a
// reset. A request body left unread is refused with RST_STREAM(NO_ERROR)
// after a complete response (RFC 9113 §8.1).
func (sc *streamConn) Close() error {
	switch {
	case sc.cut.Load():
	case sc.out == outUntilEnd:
		sc.out = outDone
		if err := sc.st.End(); err != nil {
			sc.abort()
		}
	case sc.out != outDone:
		sc.abort()
	}
	if sc.out == outDone && !sc.cut.Load() && !sc.eof {
		sc.st.Reset(http2.ErrCodeNo)
	}
	return nil
}

// abort cuts the stream: what the client has of the response is not whole.
func (sc *streamConn) abort() {
	if sc.cut.CompareAndSwap(false, true) {
		sc.st.Reset(http2.ErrCodeInternal)
	}
}

func (sc *streamConn) LocalAddr() net.Addr  { return sc.under.LocalAddr() }
func (sc *streamConn) RemoteAddr() net.Addr { return sc.under.RemoteAddr() }

func (sc *streamConn) SetDeadline(t time.Time) error {
	sc.st.SetReadDeadline(t)
	return sc.st.SetWriteDeadline(t)
}
func (sc *streamConn) SetReadDeadline(t time.Time) error  { return sc.st.SetReadDeadline(t) }
func (sc *streamConn) SetWriteDeadline(t time.Time) error { return sc.st.SetWriteDeadline(t) }

// chunkDec decodes a chunked body as it is written, handing the data to
// the stream's payload and keeping the trailers.
type chunkDec struct {
	state    chunkState
	size     int64  // data bytes left in the current chunk
	line     []byte // a size or trailer line begun in an earlier Write
	trailers []hpack.HeaderField
	done     bool
}

type chunkState uint8

const (
	chunkSize    chunkState = iota // the size line
	chunkData                      // its data
	chunkDataEnd                   // the CRLF after the data
	chunkTrailer                   // trailer lines, up to the empty one
)

var errBadChunk = errors.New("proxy: malformed chunked response body")

// payloader takes the data a chunkDec decodes.
type payloader interface{ payload(p []byte) }

// decode consumes b, handing the data to sink, and returns what is left
// after the body's end.
func (d *chunkDec) decode(b []byte, sink payloader) ([]byte, error) {
	for len(b) > 0 && !d.done {
		switch d.state {
		case chunkData:
			take := b[:min(int64(len(b)), d.size)]
			sink.payload(take)
			d.size -= int64(len(take))
			b = b[len(take):]
			if d.size == 0 {
				d.state = chunkDataEnd
			}
			continue
		}
		// A line: the size line, the CRLF after data, or a trailer.
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(d.line)+len(b) > 4096 {
				return nil, errBadChunk
			}
			d.line = append(d.line, b...)
			return nil, nil
		}
		line := b[:i+1]
		if len(d.line) > 0 {
			line = append(d.line, line...)
			d.line = d.line[:0]
		}
		b = b[i+1:]
		line = bytes.TrimRight(line, "\r\n")
		switch d.state {
		case chunkSize:
			if j := bytes.IndexByte(line, ';'); j >= 0 {
				line = line[:j] // chunk extensions mean nothing to HTTP/2
			}
			n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
			if err != nil || n < 0 {
				return nil, errBadChunk
			}
			if n == 0 {
				d.state = chunkTrailer
			} else {
				d.size, d.state = n, chunkData
			}
		case chunkDataEnd:
			if len(line) != 0 {
				return nil, errBadChunk
			}
			d.state = chunkSize
		case chunkTrailer:
			if len(line) == 0 {
				d.done = true
				break
			}
			name, value, ok := bytes.Cut(line, []byte{':'})
			if !ok {
				return nil, errBadChunk
			}
			n := lowerName(bytes.TrimSpace(name))
			if !isConnectionField(n) {
				d.trailers = append(d.trailers, hpack.HeaderField{Name: n, Value: string(bytes.TrimSpace(value))})
			}
		}
	}
	return b, nil
}
