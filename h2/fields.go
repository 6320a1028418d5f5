package h2

import (
	"golang.org/x/net/http2/hpack"
)

// fieldCheck checks one header block field by field as the HPACK decoder
// emits it, then as a whole (finish), against RFC 9113 §8.2 and §8.3: a
// request's (§8.3.1), or a response's (§8.3.2). A proxy that forwards what
// it could read differently from the next hop is a smuggling bug, so the
// checks are strict: the first violation is kept in bad and the block is
// malformed.
type fieldCheck struct {
	trailers   bool // a trailer section: no pseudo-header field at all (§8.1)
	response   bool // a response's block: :status, and no TE
	sawRegular bool
	hasHost    bool
	pseudo     uint8 // a request's pseudo fields seen, one bit each
	method     string
	scheme     string
	path       string
	authority  string
	host       string
	status     string
	length     int64 // content-length, -1 when absent
	bad        string
}

const (
	pMethod uint8 = 1 << iota
	pScheme
	pPath
	pAuthority
)

func (fc *fieldCheck) reset(trailers, response bool) {
	*fc = fieldCheck{trailers: trailers, response: response, length: -1}
}

// check checks a request's fields, or its trailers, as a whole, and
// returns their header list size (§6.5.2) and the first violation.
func (fc *fieldCheck) check(fields []hpack.HeaderField, trailers bool) (size uint64, bad string) {
	fc.reset(trailers, false)
	for _, f := range fields {
		fc.field(f)
		size += uint64(f.Size())
	}
	return size, fc.finish()
}

// field checks one field; it records the first violation only.
func (fc *fieldCheck) field(f hpack.HeaderField) {
	if fc.bad != "" {
		return
	}
	if !validValue(f.Value) {
		fc.bad = "invalid value of field " + f.Name
		return
	}
	if len(f.Name) > 0 && f.Name[0] == ':' {
		fc.pseudoField(f)
		return
	}
	fc.sawRegular = true
	if !validName(f.Name) {
		fc.bad = "invalid field name" // §8.2.1: uppercase included
		return
	}
	switch f.Name {
	// §8.2.2: connection-specific fields make a message malformed.
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		fc.bad = "connection-specific field " + f.Name
	case "te": // in requests only, and only "trailers"
		if fc.response {
			fc.bad = "connection-specific field te"
		} else if f.Value != "trailers" {
			fc.bad = "te other than trailers"
		}
	case "host":
		if fc.response {
			return
		}
		if fc.hasHost {
			fc.bad = "duplicate host"
		}
		fc.hasHost, fc.host = true, f.Value
	case "content-length":
		if fc.trailers {
			return
		}
		n, ok := parseLength(f.Value)
		if !ok || (fc.length >= 0 && fc.length != n) {
			fc.bad = "invalid content-length"
			return
		}
		fc.length = n
	}
}

func (fc *fieldCheck) pseudoField(f hpack.HeaderField) {
	if fc.trailers {
		fc.bad = "pseudo-header field in trailers" // §8.1
		return
	}
	if fc.sawRegular {
		fc.bad = "pseudo-header field after a regular one" // §8.3
		return
	}
	if fc.response {
		switch {
		case f.Name != ":status":
			fc.bad = "unexpected pseudo-header field " + f.Name // §8.3.2
		case fc.status != "":
			fc.bad = "duplicate :status"
		case f.Value == "":
			fc.bad = "empty :status"
		default:
			fc.status = f.Value
		}
		return
	}
	var bit uint8
	switch f.Name {
	case ":method":
		bit, fc.method = pMethod, f.Value
	case ":scheme":
		bit, fc.scheme = pScheme, f.Value
	case ":path":
		bit, fc.path = pPath, f.Value
	case ":authority":
		bit, fc.authority = pAuthority, f.Value
	default: // :status, :protocol (extended CONNECT is not offered) and unknown
		fc.bad = "unexpected pseudo-header field " + f.Name
		return
	}
	if fc.pseudo&bit != 0 {
		fc.bad = "duplicate " + f.Name
		return
	}
	fc.pseudo |= bit
}

// finish checks what only the whole block can show. It returns the reason the
// block is malformed, or "".
func (fc *fieldCheck) finish() string {
	if fc.bad != "" || fc.trailers {
		return fc.bad
	}
	if fc.response {
		s := fc.status
		if len(s) != 3 || s[0] < '1' || s[0] > '5' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9' {
			return "missing or invalid :status"
		}
		if s == "101" {
			return "101 does not exist in HTTP/2" // §8.6
		}
		return ""
	}
	if fc.pseudo&pMethod == 0 || fc.method == "" || !validToken(fc.method) {
		return "missing or invalid :method"
	}
	if fc.pseudo&pAuthority != 0 && !validAuthority(fc.authority) {
		return "invalid :authority"
	}
	// §8.3.1: a Host that differs from :authority is malformed (a SHOULD; a
	// proxy that routes on one and forwards the other is a smuggling target).
	if fc.hasHost && fc.pseudo&pAuthority != 0 && fc.host != fc.authority {
		return "host differs from :authority"
	}
	if fc.method == "CONNECT" { // §8.5: only :method and :authority
		if fc.pseudo != pMethod|pAuthority || fc.authority == "" {
			return "malformed CONNECT pseudo-header fields"
		}
		return ""
	}
	if fc.pseudo&(pScheme|pPath) != pScheme|pPath {
		return "missing :scheme or :path"
	}
	if fc.scheme == "" || !validToken(fc.scheme) {
		return "invalid :scheme"
	}
	if fc.path == "" {
		return "empty :path"
	}
	if fc.scheme == "http" || fc.scheme == "https" {
		// §8.3.1: origin-form, or "*" for a server-wide OPTIONS.
		if fc.path[0] != '/' && !(fc.path == "*" && fc.method == "OPTIONS") {
			return "invalid :path"
		}
	}
	if !validPath(fc.path) {
		return "invalid :path"
	}
	return ""
}

// tchar per RFC 9110 §5.6.2, uppercase excluded for field names (RFC 9113
// §8.2.1: uppercase in a field name is malformed).
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tchar[s[i]] {
			return false
		}
	}
	return true
}

// validToken is validName with uppercase allowed (methods, schemes).
func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !tchar[c] && !('A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// validValue applies RFC 9113 §8.2.1: no NUL, CR or LF anywhere, no leading
// or trailing SP or HTAB.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if badInValue[s[i]] {
			return false
		}
	}
	if s != "" {
		if c := s[0]; c == ' ' || c == '\t' {
			return false
		}
		if c := s[len(s)-1]; c == ' ' || c == '\t' {
			return false
		}
	}
	return true
}

// badInValue marks the bytes no field value may hold: one look-up a byte.
var badInValue = [256]bool{0: true, '\r': true, '\n': true}

// validPath refuses controls, spaces and bytes outside ASCII in :path, which
// could not be forwarded to an HTTP/1.1 hop as the same request target.
func validPath(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// validAuthority refuses what could not be a host[:port] or its userinfo:
// controls, spaces, and the delimiters that would end it early.
func validAuthority(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c <= ' ' || c >= 0x7f, c == '/', c == '?', c == '#', c == '\\':
			return false
		}
	}
	return true
}

// parseLength parses a content-length value: 1 to 18 decimal digits (RFC
// 9110 §8.6), so it cannot overflow.
func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// checkResponse checks a header block the handler asks to send: lowercase
// valid names, values that cannot break the framing of a later hop, and
// where required a 3-digit :status first. It returns "" when fine.
func checkResponse(fields []hpack.HeaderField, trailers bool) (status string, bad string) {
	for i, f := range fields {
		if len(f.Name) > 0 && f.Name[0] == ':' {
			if trailers || i != 0 || f.Name != ":status" {
				return "", "misplaced pseudo-header field " + f.Name
			}
			status = f.Value
			if len(status) != 3 || status[0] < '1' || status[0] > '9' ||
				status[1] < '0' || status[1] > '9' || status[2] < '0' || status[2] > '9' {
				return "", "invalid :status"
			}
			continue
		}
		if !validName(f.Name) {
			return "", "invalid field name " + f.Name
		}
		switch f.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return "", "connection-specific field " + f.Name // §8.2.2
		}
		if !validValue(f.Value) {
			return "", "invalid value of field " + f.Name
		}
	}
	if !trailers && status == "" {
		return "", "missing :status"
	}
	return status, ""
}
