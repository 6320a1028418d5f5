package upstreamtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// The parser below is deliberately small and independent of the proxy's
// own: it is the second opinion on what the proxy put on the wire. It is
// strict wherever leniency would hide a framing bug in the proxy.

const (
	maxLine = 16 << 10  // longest request line, field line or chunk-size line
	maxHead = 256 << 10 // largest head, or trailer section
)

// ErrMalformed is matched (with errors.Is) by errors about requests that
// break the HTTP/1.1 message syntax.
var ErrMalformed = errors.New("malformed request")

// ReadError is a problem the server met reading request Seq on connection
// Conn. Err matches ErrMalformed for a syntax error and io.ErrUnexpectedEOF
// for a connection that ended inside a head; other errors come from the
// network.
type ReadError struct {
	Conn, Seq int
	Err       error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("upstreamtest: conn %d request %d: %v", e.Conn, e.Seq, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// framing says how a request's body is delimited.
type framing struct {
	chunked bool
	length  int64 // without chunked: the Content-Length, 0 if absent
}

// readHead reads one request head from br. Fields not yet known (Conn, Seq,
// the body) are left zero.
func readHead(br *bufio.Reader) (*Request, framing, error) {
	r := new(Request)
	line := ""
	// RFC 9112 §2.2: a server SHOULD ignore at least one empty line received
	// before the request-line. They stay in RawHead, so tests can see them.
	for line == "" {
		var err error
		if line, err = readLine(br, &r.RawHead, false); err != nil {
			return nil, framing{}, err
		}
		if len(r.RawHead) > maxHead {
			return nil, framing{}, malformed("more than %d bytes of empty lines", maxHead)
		}
	}
	if err := r.parseRequestLine(line); err != nil {
		return nil, framing{}, err
	}
	for {
		line, err := readLine(br, &r.RawHead, false)
		if err != nil {
			return nil, framing{}, err
		}
		if len(r.RawHead) > maxHead {
			return nil, framing{}, malformed("head longer than %d bytes", maxHead)
		}
		if line == "" {
			break
		}
		f, err := parseField(line)
		if err != nil {
			return nil, framing{}, err
		}
		r.Header = append(r.Header, f)
	}
	fr, err := r.framing()
	if err != nil {
		return nil, framing{}, err
	}
	return r, fr, nil
}

// readLine reads one line, appends it exactly as received to raw and returns
// it without its line end. A line may end in CRLF or, unless crlf is set, in
// a bare LF (RFC 9112 §2.2 lets a recipient accept LF for the start-line and
// field lines). A connection that ends inside a line is io.ErrUnexpectedEOF.
func readLine(br *bufio.Reader, raw *[]byte, crlf bool) (string, error) {
	start := len(*raw)
	for {
		frag, err := br.ReadSlice('\n')
		*raw = append(*raw, frag...)
		if len(*raw)-start > maxLine {
			return "", malformed("line longer than %d bytes", maxLine)
		}
		if err == nil {
			break
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	line := (*raw)[start : len(*raw)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	} else if crlf {
		return "", malformed("line %q does not end in CRLF", line)
	}
	// RFC 9112 §2.2: a bare CR is invalid; we reject it rather than replace it.
	for _, b := range line {
		if b == '\r' {
			return "", malformed("bare CR in line %q", line)
		}
	}
	return string(line), nil
}

// parseRequestLine parses request-line = method SP request-target SP
// HTTP-version (RFC 9112 §3), with exactly one space between the parts.
func (r *Request) parseRequestLine(line string) error {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !isToken(method) || !isTarget(target) || !isVersion(proto) {
		return malformed("request line %q", line)
	}
	r.Method, r.Target, r.Proto = method, target, proto
	return nil
}

// parseField parses field-line = field-name ":" OWS field-value OWS
// (RFC 9112 §5).
func parseField(line string) (Field, error) {
	// RFC 9112 §5.2: obs-fold is rejected, not unfolded.
	if line[0] == ' ' || line[0] == '\t' {
		return Field{}, malformed("obsolete line folding in %q", line)
	}
	name, value, ok := strings.Cut(line, ":")
	if !ok {
		return Field{}, malformed("field line without a colon: %q", line)
	}
	// RFC 9112 §5.1: no whitespace between the field name and the colon.
	if !isToken(name) {
		return Field{}, malformed("field name %q", name)
	}
	value = strings.Trim(value, " \t")
	// RFC 9110 §5.5: field values hold no control characters but HTAB.
	for i := 0; i < len(value); i++ {
		if isCTL(value[i]) && value[i] != '\t' {
			return Field{}, malformed("control character in the value of %q", name)
		}
	}
	return Field{name, value}, nil
}

// framing decides how the body is delimited (RFC 9112 §6.3), rejecting
// every ambiguous case: a proxy must never send one.
func (r *Request) framing() (framing, error) {
	var te, cl []string
	for _, f := range r.Header {
		switch {
		case strings.EqualFold(f.Name, "Transfer-Encoding"):
			te = append(te, f.Value)
		case strings.EqualFold(f.Name, "Content-Length"):
			cl = append(cl, f.Value)
		}
	}
	if len(te) > 0 {
		// RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing.
		if r.Proto == "HTTP/1.0" {
			return framing{}, malformed("Transfer-Encoding in an HTTP/1.0 request")
		}
		// RFC 9112 §6.1: both may be an attempt at request smuggling.
		if len(cl) > 0 {
			return framing{}, malformed("both Transfer-Encoding and Content-Length")
		}
		codings := strings.Split(strings.Join(te, ","), ",")
		for i, c := range codings {
			c = strings.Trim(c, " \t")
			if c == "" {
				return framing{}, malformed("empty transfer coding in %q", te)
			}
			// RFC 9112 §6.3 rule 4: chunked must be the final coding, and
			// RFC 9112 §7: applied only once.
			if strings.EqualFold(c, "chunked") != (i == len(codings)-1) {
				return framing{}, malformed("chunked is not the final coding, once, in %q", te)
			}
		}
		return framing{chunked: true}, nil
	}
	// RFC 9110 §8.6 lets a recipient accept a list of identical values; we
	// do not, since the proxy should never send one.
	if len(cl) > 1 {
		return framing{}, malformed("%d Content-Length fields", len(cl))
	}
	if len(cl) == 1 {
		n, ok := parseDigits(cl[0])
		if !ok {
			return framing{}, malformed("Content-Length %q", cl[0])
		}
		return framing{length: n}, nil
	}
	return framing{}, nil
}

// bodyReader reads one request body from the connection's buffer, keeping
// the raw bytes and the decoded content in the Request as it goes. It is
// used by one goroutine at a time.
type bodyReader struct {
	br      *bufio.Reader
	r       *Request
	chunked bool
	remain  int64 // bytes left in the body (Content-Length) or in the current chunk
	crlf    bool  // chunked: the CRLF after the current chunk's data is unread
	done    bool
	err     error

	record   func() // records r; called once, by finish or abandon
	recorded bool
}

func newBodyReader(br *bufio.Reader, r *Request, fr framing, record func()) *bodyReader {
	b := &bodyReader{br: br, r: r, chunked: fr.chunked, remain: fr.length, record: record}
	if !fr.chunked && fr.length == 0 {
		b.finish()
	}
	return b
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.done {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.chunked && b.remain == 0 {
		if err := b.nextChunk(); err != nil {
			b.err = err
			return 0, err
		}
		if b.done {
			return 0, io.EOF
		}
	}
	n, err := b.br.Read(p[:min(int64(len(p)), b.remain)])
	b.r.RawBody = append(b.r.RawBody, p[:n]...)
	b.r.Decoded = append(b.r.Decoded, p[:n]...)
	b.remain -= int64(n)
	if b.remain == 0 {
		if b.chunked {
			b.crlf = true
		} else {
			b.finish()
		}
		return n, nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	b.err = err
	return n, err
}

// nextChunk reads up to the next chunk's data: the CRLF ending the previous
// chunk, and the chunk-size line; after the last chunk, the trailer section
// (RFC 9112 §7.1).
func (b *bodyReader) nextChunk() error {
	raw := &b.r.RawBody
	if b.crlf {
		// RFC 9112 §7.1: chunk-data is followed by CRLF, exactly.
		var end [2]byte
		n, err := io.ReadFull(b.br, end[:])
		*raw = append(*raw, end[:n]...)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		if end != [2]byte{'\r', '\n'} {
			return malformed("chunk data followed by %q, not CRLF", end[:])
		}
		b.crlf = false
	}
	line, err := readLine(b.br, raw, true)
	if err != nil {
		return err
	}
	size, err := parseChunkSize(line)
	if err != nil {
		return err
	}
	if size > 0 {
		b.remain = size
		return nil
	}
	// RFC 9112 §7.1.2: last-chunk, then trailer fields up to an empty line.
	start := len(*raw)
	for {
		line, err := readLine(b.br, raw, false)
		if err != nil {
			return err
		}
		if len(*raw)-start > maxHead {
			return malformed("trailer section longer than %d bytes", maxHead)
		}
		if line == "" {
			break
		}
		f, err := parseField(line)
		if err != nil {
			return err
		}
		b.r.Trailer = append(b.r.Trailer, f)
	}
	b.finish()
	return nil
}

// finish marks the body complete and records the request.
func (b *bodyReader) finish() {
	b.done = true
	b.r.Complete = true
	b.abandon()
}

// abandon records the request as it stands, unless it is recorded already.
func (b *bodyReader) abandon() {
	if !b.recorded {
		b.recorded = true
		b.record()
	}
}

// parseChunkSize parses chunk-size [ chunk-ext ] (RFC 9112 §7.1). Extensions
// are checked only loosely: BWS, then ";", then no control characters but
// HTAB.
func parseChunkSize(line string) (int64, error) {
	var size int64
	i := 0
	for ; i < len(line); i++ {
		d, ok := hexDigit(line[i])
		if !ok {
			break
		}
		if size > math.MaxInt64>>4 {
			return 0, malformed("chunk size %q overflows", line)
		}
		size = size<<4 | d
	}
	if i == 0 {
		return 0, malformed("chunk-size line %q", line)
	}
	if ext := line[i:]; ext != "" {
		// RFC 9112 §7.1.1: chunk-ext = *( BWS ";" BWS chunk-ext-name ... )
		ext = strings.TrimLeft(ext, " \t")
		if ext == "" || ext[0] != ';' {
			return 0, malformed("chunk-size line %q", line)
		}
		for j := 0; j < len(ext); j++ {
			if isCTL(ext[j]) && ext[j] != '\t' {
				return 0, malformed("control character in chunk extension %q", line)
			}
		}
	}
	return size, nil
}

// parseDigits parses 1*DIGIT into an int64.
func parseDigits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		d := int64(s[i] - '0')
		if s[i] < '0' || s[i] > '9' || n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

func hexDigit(c byte) (int64, bool) {
	switch {
	case '0' <= c && c <= '9':
		return int64(c - '0'), true
	case 'a' <= c && c <= 'f':
		return int64(c-'a') + 10, true
	case 'A' <= c && c <= 'F':
		return int64(c-'A') + 10, true
	}
	return 0, false
}

// isToken reports whether s is a token (RFC 9110 §5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// isTarget reports whether s can be a request-target: non-empty visible
// ASCII (RFC 9112 §3.2 with RFC 3986; the exact grammar is the proxy's
// business).
func isTarget(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// isVersion reports whether s is an HTTP/1.x version (RFC 9112 §2.3).
func isVersion(s string) bool {
	return len(s) == len("HTTP/1.1") && strings.HasPrefix(s, "HTTP/1.") && '0' <= s[7] && s[7] <= '9'
}

func isCTL(c byte) bool { return c < ' ' || c == 0x7f }
