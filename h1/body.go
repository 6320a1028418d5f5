package h1

import (
	"bytes"
	"io"
)

// Body reads one message body from a Reader in segments, following its
// framing exactly. In pass-through mode (the default) the segments are the
// body's wire bytes: chunk-size lines with their extensions, chunk data, the
// CRLFs, the trailer section; concatenated they reproduce the body byte for
// byte. In decode mode the segments are the data only, with chunked framing
// and trailers removed; the trailer section's field lines are kept apart
// (Trailers).
//
// Chunked framing is checked strictly as it passes (RFC 9112 §7.1): a chunk
// size that is not hex, overflows, or carries a sign; an extension with
// control characters; a missing CRLF after chunk data; a trailer field that is
// not a valid field line: each fails with ErrBadChunk, so a proxy never
// forwards bytes whose framing it could read differently from the next hop.
type Body struct {
	r          *Reader
	kind       Kind
	left       int64 // Length: body bytes left; Chunked: data left in this chunk
	state      chunkState
	decode     bool
	maxTrailer int
	trailer    int
	trailers   []byte // decode mode: the trailer field lines, CRLFs included
	err        error  // sticky: io.EOF once complete
	limited    bool   // Limit was called: room bounds the data still to come
	room       int64
	framing    bool // the last segment was chunked framing, not data
}

type chunkState uint8

const (
	stSize chunkState = iota
	stData
	stDataEnd
	stTrailer
)

// maxChunkLine bounds a chunk-size line, extensions included.
const maxChunkLine = 4 << 10

// Init prepares b to read a body with framing f from r. When decode is set,
// segments carry only the data. maxTrailer bounds the trailer section.
func (b *Body) Init(r *Reader, f Framing, decode bool, maxTrailer int) {
	*b = Body{r: r, kind: f.Kind, left: f.Length, decode: decode, maxTrailer: maxTrailer, trailers: b.trailers[:0]}
	if f.Kind == NoBody || (f.Kind == Length && f.Length == 0) {
		b.err = io.EOF
	}
}

// Trailers returns the field lines of a chunked body's trailer section as
// they came, each with its CRLF (checked as Next checks them; empty when
// there were none), in either mode. It is complete once Next has returned
// io.EOF, and valid until the next Init.
func (b *Body) Trailers() []byte { return b.trailers }

// AddTrailers adds the fields of the trailer section (see Trailers) to h,
// names as they were spelled, values without surrounding whitespace.
func (b *Body) AddTrailers(h *Header) {
	lines := b.trailers
	for len(lines) > 0 {
		end := bytes.IndexByte(lines, '\n')
		line := lines[:end-1] // without its CRLF: Next checked it ends so
		lines = lines[end+1:]
		colon := bytes.IndexByte(line, ':')
		h.AddBytes(line[:colon], trimOWS(line[colon+1:]))
	}
}

// Data reports whether the segment Next returned last is body data: false
// for the chunked framing a pass-through body also returns (a chunk-size
// line, the CRLF after chunk data, the trailer section's lines). In decode
// mode, and for a body that is not chunked, every segment is data.
func (b *Body) Data() bool { return !b.framing }

// Limit bounds the body's content (its data: not the chunk-size lines,
// CRLFs and trailers of chunked framing) to n bytes, n >= 0; it must be
// called before the first Next, and a second call lowers the bound, never
// raises it. A body whose Content-Length is over n fails at once: Next
// returns ErrBodyTooLarge and no byte of it. A chunked body fails at the
// chunk whose size would take the data past n: Next returns the segments
// before that chunk's size line, then ErrBodyTooLarge, and never the line
// itself, so whatever was passed on holds at most n bytes of data. A
// close-delimited body fails at the read that goes past n.
func (b *Body) Limit(n int64) {
	if n < 0 || b.limited && n >= b.room {
		return
	}
	b.limited, b.room = true, n
	if b.kind == Length && b.left > n && b.err == nil {
		b.err = ErrBodyTooLarge
	}
}

// Done reports whether the whole body has been read: true as soon as the
// segment holding its last byte has been returned.
func (b *Body) Done() bool { return b.err == io.EOF }

// Ready reports whether Next would return without reading: the bytes it
// needs are buffered, or the body has ended. It may report false when Next
// would not read (in decode mode it looks past one chunk's framing only,
// not past trailers), never true when Next would.
func (b *Body) Ready() bool {
	if b.err != nil {
		return true
	}
	buffered := b.r.buf[b.r.r:b.r.w]
	switch {
	case b.kind == Chunked && b.state == stData:
		return len(buffered) > 0
	case b.kind == Chunked && b.decode:
		return b.framingReady(buffered)
	case b.kind == Chunked:
		return bytes.IndexByte(buffered, '\n') >= 0
	}
	return len(buffered) > 0
}

// framingReady reports, in decode mode between chunks, whether buf holds
// the framing up to the next chunk's data and a byte of that data, or the
// last chunk and the empty trailer section: Next then returns without
// reading. Anything less, or anything odd, is false.
func (b *Body) framingReady(buf []byte) bool {
	switch b.state {
	case stDataEnd:
		if len(buf) < 2 || buf[0] != '\r' || buf[1] != '\n' {
			return false
		}
		buf = buf[2:]
	case stSize:
	default:
		return false
	}
	i := bytes.IndexByte(buf, '\n')
	if i < 1 || i+1 > maxChunkLine || buf[i-1] != '\r' {
		return false
	}
	size, ok := parseChunkLine(buf[:i+1])
	if !ok {
		return false
	}
	rest := buf[i+1:]
	if size == 0 {
		return len(rest) >= 2 && rest[0] == '\r' && rest[1] == '\n'
	}
	return len(rest) > 0
}

// Next returns the next segment of the body. The slice aliases the Reader's
// buffer and is valid until the next call on b or on the Reader. At the end
// of the body it returns io.EOF. A connection that closes before the framing
// says the body ends gives ErrTruncated; other read errors come back as is,
// and after one (a deadline passing, say) Next may be called again to go on
// where it stopped.
func (b *Body) Next() ([]byte, error) {
	if b.err != nil {
		return nil, b.err
	}
	seg, err := b.next()
	if err == io.EOF || StatusOf(err) != 0 || err == ErrTruncated {
		// The end, or bytes that can never be framed: final. An I/O error
		// (a timeout, say) leaves the state as it was, so the caller may
		// try again.
		b.err = err
	}
	return seg, err
}

func (b *Body) next() ([]byte, error) {
	switch b.kind {
	case Length:
		if b.left == 0 {
			return nil, io.EOF
		}
		seg, err := b.take(b.left)
		b.left -= int64(len(seg))
		if b.left == 0 && err == nil {
			b.err = io.EOF // Done as soon as the last byte is out
		}
		return seg, err
	case UntilClose:
		max := int64(1 << 62)
		if b.limited {
			max = b.room + 1
		}
		seg, err := b.take(max)
		if err == ErrTruncated {
			return nil, io.EOF
		}
		if b.limited {
			if int64(len(seg)) > b.room {
				return nil, ErrBodyTooLarge
			}
			b.room -= int64(len(seg))
		}
		return seg, err
	case Chunked:
		return b.nextChunked()
	}
	return nil, io.EOF
}

// take returns up to n buffered bytes, reading when none are buffered.
func (b *Body) take(n int64) ([]byte, error) {
	r := b.r
	if r.r == r.w {
		if err := r.Fill(); err != nil {
			if err == io.EOF {
				return nil, ErrTruncated
			}
			return nil, err
		}
	}
	m := int64(r.w - r.r)
	if m > n {
		m = n
	}
	seg := r.buf[r.r : r.r+int(m)]
	r.r += int(m)
	return seg, nil
}

func (b *Body) nextChunked() ([]byte, error) {
	b.framing = !b.decode
	for {
		switch b.state {
		case stSize:
			line, err := b.r.line(maxChunkLine)
			if err != nil {
				return nil, err
			}
			size, ok := parseChunkLine(line)
			if !ok {
				return nil, ErrBadChunk
			}
			if b.limited {
				if size > b.room {
					return nil, ErrBodyTooLarge
				}
				b.room -= size
			}
			if size == 0 {
				b.state = stTrailer
			} else {
				b.left, b.state = size, stData
			}
			if !b.decode {
				return line, nil
			}
		case stData:
			b.framing = false
			seg, err := b.take(b.left)
			b.left -= int64(len(seg))
			if b.left == 0 {
				b.state = stDataEnd
			}
			return seg, err
		case stDataEnd:
			line, err := b.r.line(2)
			if err == ErrChunkLine || (err == nil && len(line) != 2) {
				return nil, ErrBadChunk // chunk data longer than its size
			}
			if err != nil {
				return nil, err
			}
			b.state = stSize
			if !b.decode {
				return line, nil
			}
		case stTrailer:
			line, err := b.r.line(b.maxTrailer - b.trailer + 2)
			if err == ErrChunkLine {
				return nil, ErrTrailerLarge
			}
			if err != nil {
				return nil, err
			}
			b.trailer += len(line)
			last := len(line) == 2
			if !last && !validFieldLine(line[:len(line)-2]) {
				return nil, ErrBadChunk
			}
			if last && b.decode {
				return nil, io.EOF
			}
			if !last {
				b.trailers = append(b.trailers, line...)
			}
			if last {
				b.err = io.EOF // the final CRLF is returned, then EOF
			}
			if !b.decode {
				return line, nil
			}
		}
	}
}

// line returns the next line including its CRLF, reading as needed. Lines
// must end in CRLF (a bare LF fails with ErrBadChunk) and be at most max
// bytes long, else ErrChunkLine.
func (b *Reader) line(max int) ([]byte, error) {
	for {
		if i := bytes.IndexByte(b.buf[b.r:b.w], '\n'); i >= 0 {
			if i+1 > max {
				return nil, ErrChunkLine
			}
			if i == 0 || b.buf[b.r+i-1] != '\r' {
				return nil, ErrBadChunk
			}
			line := b.buf[b.r : b.r+i+1]
			b.r += i + 1
			return line, nil
		}
		if b.w-b.r >= max {
			return nil, ErrChunkLine
		}
		b.makeRoom(max + 2)
		if err := b.Fill(); err != nil {
			if err == io.EOF {
				return nil, ErrTruncated
			}
			return nil, err
		}
	}
}

// parseChunkLine parses "chunk-size [ chunk-ext ] CRLF" (RFC 9112 §7.1).
func parseChunkLine(line []byte) (int64, bool) {
	line = line[:len(line)-2]
	i, size := 0, int64(0)
	for ; i < len(line) && isHex(line[i]); i++ {
		if size > (1<<62)>>4 {
			return 0, false // overflow
		}
		size = size<<4 | int64(unhex(line[i]))
	}
	if i == 0 {
		return 0, false
	}
	ext := line[i:]
	// chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] )
	j := 0
	for j < len(ext) && (ext[j] == ' ' || ext[j] == '\t') {
		j++
	}
	if j < len(ext) && ext[j] != ';' {
		return 0, false
	}
	if j == len(ext) && j > 0 {
		return 0, false // trailing whitespace with no extension
	}
	for _, c := range ext {
		if !isValueByte(c) {
			return 0, false
		}
	}
	return size, true
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// validFieldLine reports whether line (without CRLF) is a valid field line.
func validFieldLine(line []byte) bool {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 || !isToken(line[:colon]) {
		return false
	}
	for _, c := range line[colon+1:] {
		if !isValueByte(c) {
			return false
		}
	}
	return true
}
