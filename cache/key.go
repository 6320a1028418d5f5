package cache

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// Key says what a response is stored under: the parts of the request that
// make its primary cache key (RFC 9111 §2), in order. The zero Key is
// DefaultKey. A Key is immutable.
type Key struct {
	parts []keyPart
}

type keyPart struct {
	kind keyKind
	name string // header or cookie name; a header's lower-case
}

type keyKind uint8

const (
	keyMethod keyKind = iota + 1
	keyScheme
	keyHost
	keyPath
	keyQuery
	keyHeader
	keyCookie
)

// DefaultKey is [method, scheme, host, path, query]: the request's URI, as
// RFC 9111 §2 keys a response (HEAD shares GET's).
var DefaultKey = Key{parts: []keyPart{{kind: keyMethod}, {kind: keyScheme}, {kind: keyHost}, {kind: keyPath}, {kind: keyQuery}}}

// ParseKey reads a key's parts: method, scheme, host, path, query,
// header:NAME (the field's values) and cookie:NAME (one cookie's value),
// each at most once. Scheme and host are required: without them a
// response for one site would answer another's request (a route that
// serves one host may leave host out of the URI, never out of the key).
func ParseKey(parts []string) (Key, error) {
	var k Key
	seen := map[string]bool{}
	for _, p := range parts {
		var kp keyPart
		switch lp := strings.ToLower(p); {
		case lp == "method":
			kp.kind = keyMethod
		case lp == "scheme":
			kp.kind = keyScheme
		case lp == "host":
			kp.kind = keyHost
		case lp == "path":
			kp.kind = keyPath
		case lp == "query":
			kp.kind = keyQuery
		case strings.HasPrefix(lp, "header:"):
			kp.kind, kp.name = keyHeader, strings.ToLower(p[len("header:"):])
			if !h1.ValidName(kp.name) {
				return Key{}, fmt.Errorf("%q: %q is not a field name", p, kp.name)
			}
		case strings.HasPrefix(lp, "cookie:"):
			kp.kind, kp.name = keyCookie, p[len("cookie:"):]
			if !h1.ValidName(kp.name) {
				return Key{}, fmt.Errorf("%q: %q is not a cookie name", p, kp.name)
			}
		default:
			return Key{}, fmt.Errorf("unknown key part %q (method, scheme, host, path, query, header:NAME, cookie:NAME)", p)
		}
		id := strings.ToLower(p)
		if seen[id] {
			return Key{}, fmt.Errorf("key part %q is given twice", p)
		}
		seen[id] = true
		k.parts = append(k.parts, kp)
	}
	if !seen["scheme"] || !seen["host"] {
		return Key{}, fmt.Errorf("the key must include scheme and host (a response for one site must not answer another's request)")
	}
	if !seen["path"] {
		return Key{}, fmt.Errorf("the key must include path")
	}
	return k, nil
}

// String returns the key as the config writes it.
func (k Key) String() string {
	if k.parts == nil {
		k = DefaultKey
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, p := range k.parts {
		if i > 0 {
			b.WriteString(", ")
		}
		switch p.kind {
		case keyMethod:
			b.WriteString("method")
		case keyScheme:
			b.WriteString("scheme")
		case keyHost:
			b.WriteString("host")
		case keyPath:
			b.WriteString("path")
		case keyQuery:
			b.WriteString("query")
		case keyHeader:
			b.WriteString("header:" + p.name)
		case keyCookie:
			b.WriteString("cookie:" + p.name)
		}
	}
	b.WriteByte(']')
	return b.String()
}

// appendPrimary appends the primary key of the session's request to dst.
// Parts are separated by NUL, which no part can hold.
func (k Key) appendPrimary(dst []byte, s *proxy.Session) []byte {
	parts := k.parts
	if parts == nil {
		parts = DefaultKey.parts
	}
	req := &s.Request
	for i, p := range parts {
		if i > 0 {
			dst = append(dst, 0)
		}
		switch p.kind {
		case keyMethod:
			m := req.Method()
			if m == "HEAD" {
				m = "GET" // a HEAD is answered from the GET's response
			}
			dst = append(dst, m...)
		case keyScheme:
			dst = append(dst, scheme(s)...)
		case keyHost:
			dst = appendHost(dst, req.Header.Get("Host"), scheme(s))
		case keyPath:
			dst = append(dst, req.Path()...)
		case keyQuery:
			t := req.Target()
			if i := bytes.IndexByte(t, '?'); i >= 0 {
				dst = append(dst, t[i:]...)
			}
		case keyHeader:
			var present bool
			n := len(dst)
			dst, present = normalizeField(append(dst, 1), &req.Header, p.name)
			if !present {
				dst[n] = 2
			}
		case keyCookie:
			if v, ok := cookie(&req.Header, p.name); ok {
				dst = append(dst, 1)
				dst = append(dst, v...)
			} else {
				dst = append(dst, 2)
			}
		}
	}
	return dst
}

// appendURL appends the request's URL, scheme://host/path?query, which
// purges and invalidations name responses by.
func appendURL(dst []byte, s *proxy.Session) []byte {
	sch := scheme(s)
	dst = append(dst, sch...)
	dst = append(dst, "://"...)
	dst = appendHost(dst, s.Request.Header.Get("Host"), sch)
	return append(dst, s.Request.Target()...)
}

// scheme is the scheme of the client's request: https over TLS.
func scheme(s *proxy.Session) string {
	if s.TLS != nil {
		return "https"
	}
	return "http"
}

// appendHost appends a Host value lower-cased, without a trailing dot or
// the scheme's default port, so that the names of one host key alike.
func appendHost(dst, host []byte, scheme string) []byte {
	if n := len(host); n > 3 && host[n-3] == ':' && host[n-2] == '8' && host[n-1] == '0' && scheme == "http" {
		host = host[:n-3]
	} else if n > 4 && string(host[n-4:]) == ":443" && scheme == "https" {
		host = host[:n-4]
	}
	if n := len(host); n > 0 && host[n-1] == '.' {
		host = host[:n-1]
	}
	n := len(dst)
	dst = append(dst, host...)
	lower(dst[n:])
	return dst
}

// cookie returns the value of the cookie named name in the request's
// Cookie fields (RFC 6265 §5.4: "a=1; b=2"), the first if it is there twice.
func cookie(h *h1.Header, name string) ([]byte, bool) {
	for i := 0; i < h.Len(); i++ {
		if !h1.EqualFold(h.Name(i), "Cookie") {
			continue
		}
		for v := h.Value(i); len(v) > 0; {
			var pair []byte
			if j := bytes.IndexByte(v, ';'); j >= 0 {
				pair, v = v[:j], v[j+1:]
			} else {
				pair, v = v, nil
			}
			pair = bytes.TrimSpace(pair)
			if j := bytes.IndexByte(pair, '='); j >= 0 && string(pair[:j]) == name {
				return pair[j+1:], true
			}
		}
	}
	return nil, false
}
