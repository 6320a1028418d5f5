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

// lastValues keeps the short values of the last response an h2exchange
// sent, by position. Its next response comes more often than not from the
// same upstream, with the same fields in the same order and most values
// unchanged (server, content-type, cache-control): those reuse the strings
// kept instead of each allocating a copy.
type lastValues [16]string

// maxKeptValue bounds a value kept: long ones (cookies, policies) are
// seldom repeated and would hold memory in pooled h2exchanges.
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
