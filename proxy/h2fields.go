package proxy

import (
	"strconv"

	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h1"
)

// HTTP/2 header fields from response and request heads: lowercase names,
// connection-specific fields left out, strings reused where they can be.

// connectionFields are the fields HTTP/2 forbids (RFC 9113 §8.2.2).
var connectionFields = []string{"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}

// appendFields appends the HTTP/2 header block of resp: :status, then its
// fields with lowercase names, without those that are connection-specific.
// Values seen lately (see interned) reuse their strings.
func appendFields(dst []hpack.HeaderField, resp *h1.Response, seen *interned) []hpack.HeaderField {
	dst = append(dst, hpack.HeaderField{Name: ":status", Value: statusText(resp.Status)})
	return appendHeader(dst, &resp.Header, seen)
}

// appendHeader appends the HTTP/2 fields of h: lowercase names, without
// those that are connection-specific.
func appendHeader(dst []hpack.HeaderField, h *h1.Header, seen *interned) []hpack.HeaderField {
	for i := 0; i < h.Len(); i++ {
		name := lowerName(h.Name(i))
		if isConnectionField(name) {
			continue
		}
		v := h.Value(i)
		if name == "x-request-id" {
			// Unique to each message: kept, it would only push out
			// values that come again.
			dst = append(dst, headerField(name, string(v)))
			continue
		}
		dst = append(dst, headerField(name, seen.of(v)))
	}
	return dst
}

// interned keeps the short strings an exchange made of field values lately,
// so that the next message, which more often than not carries the same
// fields with most values unchanged (server, content-type, a user agent,
// a gRPC call's method and status), reuses them instead of allocating a
// copy of each: a small table indexed by a cheap hash, two ways, the
// newest string first.
type interned [32]string

// maxKeptValue bounds a value kept: long ones (cookies, policies) are
// seldom repeated and would hold memory in pooled exchanges.
const maxKeptValue = 64

// of returns b as a string: the one kept for it when there is one.
func (t *interned) of(b []byte) string {
	n := len(b)
	if n == 0 {
		return ""
	}
	if n > maxKeptValue {
		return string(b)
	}
	i := (n*131 + int(b[0])*31 + int(b[n/2])*7 + int(b[n-1])) & (len(t) - 1)
	switch string(b) { // compared without a copy
	case t[i]:
		return t[i]
	case t[i^1]:
		return t[i^1]
	}
	t[i^1], t[i] = t[i], string(b)
	return t[i]
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
	"grpc-encoding", "grpc-accept-encoding", "grpc-status", "grpc-message", "idempotency-key"}

// isConnectionField reports whether name, in lowercase, is one of
// connectionFields: by its length first, as most names are passed over.
func isConnectionField(name string) bool {
	switch len(name) {
	case len("upgrade"):
		return name == "upgrade"
	case len("connection"):
		return name == "connection" || name == "keep-alive"
	case len("proxy-connection"):
		return name == "proxy-connection"
	case len("transfer-encoding"):
		return name == "transfer-encoding"
	}
	return false
}

// isConnectionFieldFold is isConnectionField for a name in any case,
// without a lowercased copy.
func isConnectionFieldFold(name []byte) bool {
	for _, c := range connectionFields {
		if h1.EqualFold(name, c) {
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
