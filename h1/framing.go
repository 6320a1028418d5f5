package h1

import "bytes"

// Kind says how a message body is delimited (RFC 9112 §6).
type Kind uint8

const (
	NoBody     Kind = iota // no body at all
	Length                 // Content-Length bytes
	Chunked                // chunked transfer coding
	UntilClose             // the body runs until the connection closes (responses only)
)

func (k Kind) String() string {
	switch k {
	case NoBody:
		return "none"
	case Length:
		return "length"
	case Chunked:
		return "chunked"
	case UntilClose:
		return "until-close"
	}
	return "unknown"
}

// Framing is how one message body is delimited.
type Framing struct {
	Kind   Kind
	Length int64 // for Kind Length
}

// Empty reports whether the message has no body bytes at all.
func (f Framing) Empty() bool { return f.Kind == NoBody || (f.Kind == Length && f.Length == 0) }

// ValidateRequest checks the parts of a request head that decide its framing
// and its destination, and returns the framing. A request that fails is one a
// proxy must answer itself (with the *Error's status) and never forward, and
// after which it must close the connection, since the bytes that follow
// cannot be trusted to start a request. The checks are the smuggling defences
// of RFC 9112:
//
//   - Transfer-Encoding together with Content-Length: 400 (§6.1 allows
//     forwarding with Content-Length removed; rejecting is the safe choice).
//   - Transfer-Encoding in an HTTP/1.0 request: 400 (§6.1).
//   - Transfer-Encoding whose final coding is not chunked: 400 (§6.3); other
//     codings before chunked: 501, since only chunked is understood.
//   - Content-Length values that differ or are not plain digits: 400 (§6.3).
//   - HTTP/1.1 without Host, more than one Host, or an invalid Host: 400 (§3.2).
func ValidateRequest(r *Request) (Framing, error) {
	if err := checkHost(&r.Header, r.Minor); err != nil {
		return Framing{}, err
	}
	te, hasTE, err := transferCoding(&r.Header)
	if err != nil {
		return Framing{}, err
	}
	cl, hasCL, err := contentLength(&r.Header)
	if err != nil {
		return Framing{}, err
	}
	switch {
	case hasTE && hasCL:
		return Framing{}, errorf(400, "both Transfer-Encoding and Content-Length")
	case hasTE && r.Minor == 0:
		return Framing{}, errorf(400, "Transfer-Encoding in an HTTP/1.0 request")
	case hasTE && te == codingOther:
		return Framing{}, errorf(400, "Transfer-Encoding does not end with chunked")
	case hasTE && te == codingChunkedAfterOthers:
		return Framing{}, errorf(501, "Transfer-Encoding other than chunked")
	case hasTE:
		return Framing{Kind: Chunked}, nil
	case hasCL && cl > 0:
		return Framing{Kind: Length, Length: cl}, nil
	}
	return Framing{Kind: NoBody}, nil
}

// ResponseFraming returns the framing of a response to a request with the
// given method (RFC 9112 §6.3). reusable is false when the framing itself
// rules out reusing the connection afterwards: a body delimited by close, or
// Transfer-Encoding and Content-Length together. An invalid Content-Length or
// Transfer-Encoding in an HTTP/1.0 response is an *Error (status 502).
func ResponseFraming(method string, r *Response) (f Framing, reusable bool, err error) {
	if r.Status < 200 || r.Status == 204 || r.Status == 304 || method == "HEAD" {
		return Framing{Kind: NoBody}, true, nil
	}
	te, hasTE, err := transferCoding(&r.Header)
	if err != nil {
		return Framing{}, false, errorf(502, "invalid Transfer-Encoding in response")
	}
	if hasTE {
		if r.Minor == 0 {
			return Framing{}, false, errorf(502, "Transfer-Encoding in an HTTP/1.0 response")
		}
		if te == codingOther {
			return Framing{Kind: UntilClose}, false, nil
		}
		// §6.3: Transfer-Encoding overrides Content-Length; such a message
		// may be an attempt at smuggling, so the connection is not reused.
		return Framing{Kind: Chunked}, !r.Header.Has("Content-Length"), nil
	}
	cl, hasCL, err := contentLength(&r.Header)
	if err != nil {
		return Framing{}, false, errorf(502, "invalid Content-Length in response")
	}
	if hasCL {
		return Framing{Kind: Length, Length: cl}, true, nil
	}
	return Framing{Kind: UntilClose}, false, nil
}

// KeepAlive reports whether the sender of a message with this version and
// header allows the connection to persist (RFC 9112 §9.3).
func KeepAlive(minor int, h *Header) bool {
	keep, _ := KeepAliveClose(minor, h)
	return keep
}

// KeepAliveClose is KeepAlive, and whether the sender asked for the
// connection's close (Connection: close), which a proxy may act on beyond
// this connection; the field is looked through once for both.
func KeepAliveClose(minor int, h *Header) (keep, close bool) {
	close = h.HasToken("Connection", "close")
	return !close && (minor >= 1 || h.HasToken("Connection", "keep-alive")), close
}

type coding uint8

const (
	codingChunked            coding = iota // exactly "chunked"
	codingChunkedAfterOthers               // "gzip, chunked" and the like
	codingOther                            // final coding is not chunked
)

// transferCoding summarises the Transfer-Encoding fields.
func transferCoding(h *Header) (c coding, present bool, err error) {
	n, chunked, last := 0, 0, false
	for i := h.Index("Transfer-Encoding"); i >= 0 && i < h.Len(); i++ {
		if !equalFold(h.Name(i), "Transfer-Encoding") {
			continue
		}
		present = true
		v := h.Value(i)
		for len(v) > 0 {
			var item []byte
			item, v = CutList(v)
			if len(item) == 0 {
				continue // empty list elements are ignored (RFC 9110 §5.6.1)
			}
			n++
			last = equalFold(item, "chunked")
			if last {
				chunked++
			}
		}
	}
	switch {
	case !present:
		return 0, false, nil
	case n == 0 || chunked > 1:
		// §6.1: chunked must not be applied more than once.
		return 0, true, errorf(400, "malformed Transfer-Encoding")
	case !last:
		return codingOther, true, nil
	case n > 1:
		return codingChunkedAfterOthers, true, nil
	}
	return codingChunked, true, nil
}

// contentLength returns the Content-Length, which may be repeated (in one
// list or several fields) only with identical values (RFC 9110 §8.6).
func contentLength(h *Header) (n int64, present bool, err error) {
	n = -1
	for i := h.Index("Content-Length"); i >= 0 && i < h.Len(); i++ {
		if !equalFold(h.Name(i), "Content-Length") {
			continue
		}
		present = true
		v := h.Value(i)
		for {
			var item []byte
			j := bytes.IndexByte(v, ',')
			if j >= 0 {
				item, v = trimOWS(v[:j]), v[j+1:]
			} else {
				item = trimOWS(v)
			}
			m, ok := ParseDecimal(item)
			if !ok {
				return 0, true, errorf(400, "malformed Content-Length")
			}
			if n >= 0 && m != n {
				return 0, true, errorf(400, "conflicting Content-Length values")
			}
			n = m
			if j < 0 {
				break
			}
		}
	}
	if !present {
		return 0, false, nil
	}
	return n, true, nil
}

// ParseDecimal parses 1*DIGIT (RFC 9110's form for Content-Length and
// other counts) into a non-negative int64, refusing signs, spaces, and
// values of more than 18 digits (over an exabyte).
func ParseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// checkHost enforces RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host
// field, and any Host field has a valid uri-host [ ":" port ] value.
func checkHost(h *Header, minor int) error {
	seen := false
	for i := h.Index("Host"); i >= 0 && i < h.Len(); i++ {
		if !equalFold(h.Name(i), "Host") {
			continue
		}
		if seen {
			return errorf(400, "more than one Host header")
		}
		seen = true
		if !validHost(h.Value(i)) {
			return errorf(400, "invalid Host header")
		}
	}
	if !seen && minor >= 1 {
		return errorf(400, "missing Host header")
	}
	return nil
}

// validHost accepts reg-name or IP-literal, optionally followed by a port
// (RFC 3986 §3.2.2), and an empty value. It rejects anything that could
// change the meaning of a URL built from it (userinfo, path, list commas).
func validHost(v []byte) bool {
	host, port := v, []byte(nil)
	if len(v) > 0 && v[0] == '[' {
		end := bytes.IndexByte(v, ']')
		if end < 0 {
			return false
		}
		for _, c := range v[1:end] {
			if !(isHex(c) || c == ':' || c == '.') {
				return false
			}
		}
		host, port = nil, v[end+1:]
		if len(port) > 0 {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
	} else if i := bytes.LastIndexByte(v, ':'); i >= 0 {
		host, port = v[:i], v[i+1:]
		if len(port) == 0 {
			return false
		}
	}
	for _, c := range host {
		if !hostByte[c] {
			return false
		}
	}
	if len(port) > 5 {
		return false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// hostByte marks reg-name characters: unreserved, pct-encoded, and the
// sub-delims other than ",".
var hostByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~%!$&'()*+;=" {
		t[c] = true
	}
	return t
}()

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}
