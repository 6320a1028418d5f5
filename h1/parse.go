package h1

import (
	"bytes"
	"encoding/binary"
)

// Request is an HTTP/1.x request head: the request line and the header
// fields. Its zero value is empty; reuse one with Reset.
type Request struct {
	Header Header
	method string
	t0, t1 int32 // target, in Header's arena
	// Minor is the minor HTTP version: 0 for HTTP/1.0, 1 for HTTP/1.1.
	// A higher HTTP/1.x minor version is recorded as 1 (RFC 9110 §6.2).
	Minor int
}

// Method returns the request method. Common methods come from constants, so
// reading it does not allocate.
func (r *Request) Method() string { return r.method }

// SetMethod sets the method.
func (r *Request) SetMethod(m string) { r.method = m }

// Target returns the request-target as received (or as set by SetTarget).
func (r *Request) Target() []byte { return r.Header.arena[r.t0:r.t1] }

// SetTarget replaces the request-target.
func (r *Request) SetTarget(t string) {
	r.t0 = int32(len(r.Header.arena))
	r.Header.arena = append(r.Header.arena, t...)
	r.t1 = int32(len(r.Header.arena))
}

// SetTargetBytes is SetTarget for a byte slice, which may alias r's own
// target (a suffix of it, say): the old bytes stay where they are.
func (r *Request) SetTargetBytes(t []byte) {
	r.t0 = int32(len(r.Header.arena))
	r.Header.arena = append(r.Header.arena, t...)
	r.t1 = int32(len(r.Header.arena))
}

// Path returns the target up to any query, for origin-form targets.
func (r *Request) Path() []byte {
	t := r.Target()
	if i := bytes.IndexByte(t, '?'); i >= 0 {
		return t[:i]
	}
	return t
}

// Reset empties r for reuse.
func (r *Request) Reset() {
	r.Header.Reset()
	r.method = ""
	r.t0, r.t1 = 0, 0
	r.Minor = 0
}

// CopyFrom makes r a copy of src.
func (r *Request) CopyFrom(src *Request) {
	r.Header.CopyFrom(&src.Header)
	r.method, r.t0, r.t1, r.Minor = src.method, src.t0, src.t1, src.Minor
}

// Response is an HTTP/1.x response head: the status line and the header
// fields. Its zero value is empty; reuse one with Reset.
type Response struct {
	Header Header
	Status int
	r0, r1 int32 // reason phrase, in Header's arena
	// Minor is the minor HTTP version: 0 for HTTP/1.0, 1 for HTTP/1.1.
	Minor int
}

// Reason returns the reason phrase, possibly empty.
func (r *Response) Reason() []byte { return r.Header.arena[r.r0:r.r1] }

// SetReason replaces the reason phrase.
func (r *Response) SetReason(s string) {
	r.r0 = int32(len(r.Header.arena))
	r.Header.arena = append(r.Header.arena, s...)
	r.r1 = int32(len(r.Header.arena))
}

// Reset empties r for reuse.
func (r *Response) Reset() {
	r.Header.Reset()
	r.Status, r.r0, r.r1, r.Minor = 0, 0, 0, 0
}

// ParseRequest parses raw, one complete request head ending with its empty
// line (as Reader.ReadHead returns it), into r. It copies raw, so raw may be
// reused afterwards. It enforces RFC 9112 syntax strictly: exactly one SP
// between the parts of the request line, a token method, no whitespace before
// a field's colon, no obs-fold, no control characters in a field; and at most
// maxHeaders fields. Violations are *Error values carrying the status to
// answer. Semantics (Host, framing) are checked by RequestFraming.
func ParseRequest(r *Request, raw []byte, maxHeaders int) error {
	r.Reset()
	r.Header.arena = append(r.Header.arena, raw...)
	b := r.Header.arena

	end, next := lineAt(b, 0)
	line := b[:end]
	// RFC 9112 §3: request-line = method SP request-target SP HTTP-version
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return errorf(400, "malformed request line")
	}
	if !isToken(line[:sp1]) {
		return errorf(400, "malformed request method")
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return errorf(400, "malformed request line")
	}
	target := rest[:sp2]
	for _, c := range target {
		// RFC 9112 §3.2: no whitespace or control characters in the target.
		if c <= ' ' || c == 0x7f {
			return errorf(400, "malformed request target")
		}
	}
	minor, err := parseVersion(rest[sp2+1:])
	if err != nil {
		return err
	}
	r.method = internMethod(line[:sp1])
	r.t0 = int32(sp1 + 1)
	r.t1 = r.t0 + int32(sp2)
	r.Minor = minor
	return parseFields(&r.Header, b, next, maxHeaders, 400)
}

// ParseResponse parses raw, one complete response head, into r, as strictly
// as ParseRequest. Violations are *Error values with Status 502.
func ParseResponse(r *Response, raw []byte, maxHeaders int) error {
	r.Reset()
	r.Header.arena = append(r.Header.arena, raw...)
	b := r.Header.arena

	end, next := lineAt(b, 0)
	line := b[:end]
	// RFC 9112 §4: status-line = HTTP-version SP status-code SP [ reason-phrase ]
	if len(line) < 12 || line[8] != ' ' {
		return errorf(502, "malformed status line")
	}
	minor, err := parseVersion(line[:8])
	if err != nil {
		return errorf(502, "malformed status line: "+err.Error())
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return errorf(502, "malformed status code")
		}
		code = code*10 + int(c-'0')
	}
	if code < 100 || code > 599 {
		return errorf(502, "status code out of range")
	}
	r.r0, r.r1 = 12, 12
	if len(line) > 12 {
		// Some servers omit the space before an empty reason; a present
		// reason must follow one SP.
		if line[12] != ' ' {
			return errorf(502, "malformed status line")
		}
		for _, c := range line[13:] {
			if !isValueByte(c) {
				return errorf(502, "control character in reason phrase")
			}
		}
		r.r0, r.r1 = 13, int32(len(line))
	}
	r.Status = code
	r.Minor = minor
	return parseFields(&r.Header, b, next, maxHeaders, 502)
}

// parseFields parses field lines from b[i:] up to the empty line into h,
// whose arena is b. Each line is read once: its name up to the colon, then
// its value up to the first byte a value may not hold, which must be the
// line's end (LF, or CRLF); lineAt is needed only to word an error.
func parseFields(h *Header, b []byte, i, maxHeaders, status int) error {
	for i < len(b) {
		switch b[i] {
		case '\n':
			return nil // the empty line that ends the head
		case '\r':
			if i+1 < len(b) && b[i+1] == '\n' {
				return nil
			}
		case ' ', '\t':
			// RFC 9112 §5.2: obs-fold is rejected (a proxy must not pass it on).
			return errorf(status, "obsolete line folding in header")
		}
		// RFC 9112 §5.1: no whitespace between field name and colon; the
		// name must be a token, which also excludes any other whitespace.
		// The name is scanned up to the first byte that is not a token's,
		// which must be the colon.
		colon := i
		for colon < len(b) && tchar[b[colon]] {
			colon++
		}
		if colon == i || colon == len(b) || b[colon] != ':' {
			return nameError(b, i, colon, status)
		}
		// RFC 9110 §5.5: no CR, LF, NUL or other controls in values. The
		// first byte a value may not hold ends the line, or the message.
		end := valueEnd(b, colon+1)
		next := end
		switch {
		case end == len(b): // no LF: the line runs to the end of b
		case b[end] == '\n':
			next = end + 1
		case b[end] == '\r' && end+1 < len(b) && b[end+1] == '\n':
			next = end + 2
		default:
			return errorf(status, "control character in header field value")
		}
		v0, v1 := colon+1, end
		for v0 < v1 && (b[v0] == ' ' || b[v0] == '\t') {
			v0++
		}
		for v1 > v0 && (b[v1-1] == ' ' || b[v1-1] == '\t') {
			v1--
		}
		if len(h.fields) >= maxHeaders {
			return ErrTooManyHeaders
		}
		h.fields = append(h.fields, field{
			n0: int32(i), n1: int32(colon),
			v0: int32(v0), v1: int32(v1),
		})
		h.names |= nameBit(b[i:colon])
		i = next
	}
	return errorf(status, "header section not terminated")
}

// nameError words the error of a field line at b[i:] whose name, a token,
// ends at b[colon] without the colon that must follow it.
func nameError(b []byte, i, colon, status int) error {
	end, _ := lineAt(b, i)
	line := b[i:end]
	if c := colon - i; c == len(line) || bytes.IndexByte(line[c:], ':') < 0 {
		return errorf(status, "header field without a colon")
	}
	return errorf(status, "malformed header field name")
}

// valueEnd returns the index of the first byte of b[i:] that isValueByte
// refuses, or len(b). It looks at eight bytes at a time: a word none of
// whose bytes is below SP or DEL needs no closer look (HTAB, the one
// control allowed, sends its word to the byte by byte check).
func valueEnd(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		// A byte below 0x20 (the high bits of x-0x20… where x's own are
		// clear), or equal to 0x7f (a zero byte of x^0x7f…).
		y := x ^ 0x7f*ones
		if (x-0x20*ones)&^x&highs|(y-ones)&^y&highs != 0 {
			for k, c := range b[i : i+8] {
				if !isValueByte(c) {
					return i + k
				}
			}
		}
	}
	for ; i < len(b); i++ {
		if !isValueByte(b[i]) {
			return i
		}
	}
	return i
}

// lineAt returns the end of the line starting at b[i] (excluding CRLF or LF)
// and the start of the next line. A line without LF runs to the end of b.
// A CR is dropped only right before the LF; any other CR stays in the line
// and fails character validation (RFC 9112 §2.2: bare CR is invalid).
func lineAt(b []byte, i int) (end, next int) {
	j := bytes.IndexByte(b[i:], '\n')
	if j < 0 {
		return len(b), len(b)
	}
	end = i + j
	next = end + 1
	if end > i && b[end-1] == '\r' {
		end--
	}
	return end, next
}

// parseVersion parses "HTTP/1.x" and returns the minor version (0 or 1).
func parseVersion(v []byte) (int, error) {
	if len(v) != 8 || string(v[:5]) != "HTTP/" || v[6] != '.' ||
		v[5] < '0' || v[5] > '9' || v[7] < '0' || v[7] > '9' {
		return 0, errorf(400, "malformed HTTP version")
	}
	if v[5] != '1' {
		return 0, errorf(505, "HTTP version not supported")
	}
	if v[7] == '0' {
		return 0, nil
	}
	return 1, nil
}

// internMethod returns the method as a string, without allocating for the
// methods of RFC 9110 and PATCH.
func internMethod(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "HEAD":
		return "HEAD"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "OPTIONS":
		return "OPTIONS"
	case "PATCH":
		return "PATCH"
	case "TRACE":
		return "TRACE"
	case "CONNECT":
		return "CONNECT"
	}
	return string(m)
}

// tchar marks the characters of a token (RFC 9110 §5.6.2).
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tchar[c] {
			return false
		}
	}
	return true
}

// isValueByte reports whether c may appear in a field value or reason
// phrase: HTAB, SP, VCHAR or obs-text (RFC 9110 §5.5).
func isValueByte(c byte) bool {
	return c == '\t' || (c >= ' ' && c != 0x7f)
}

// ValidName reports whether name is a valid field name (a token).
func ValidName(name string) bool { return isToken([]byte(name)) }

// ValidValue reports whether v may be sent as a field value.
func ValidValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if !isValueByte(v[i]) {
			return false
		}
	}
	return true
}
