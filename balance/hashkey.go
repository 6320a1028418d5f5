package balance

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluice-proxy/sluice/h1"
)

// HashKey says which part of a request the Hash policy hashes: the client's
// IP address, a header's value, a cookie's value or the request target. It
// is parsed from a configuration's hash_key by ParseHashKey, and Append
// extracts the key from a request. The zero value extracts nothing (an empty
// key, for which Hash falls back to round robin).
//
// The group itself only takes the key's bytes (Request.HashKey); extraction
// is the caller's, with this helper, so that balance does not decide where
// requests come from.
type HashKey struct {
	from keySource
	name string // header or cookie name
}

type keySource uint8

const (
	keyNone keySource = iota
	keyClientIP
	keyHeader
	keyCookie
	keyURI
)

// ErrHashKey is returned (wrapped) by ParseHashKey for a malformed key.
var ErrHashKey = errors.New("invalid hash key")

// ParseHashKey parses a hash_key setting: "client_ip", "header:NAME",
// "cookie:NAME" or "uri". A header name must be a valid field name (RFC
// 9110 §5.1); a cookie name a token (RFC 6265 §4.1.1).
func ParseHashKey(s string) (HashKey, error) {
	switch s {
	case "client_ip":
		return HashKey{from: keyClientIP}, nil
	case "uri":
		return HashKey{from: keyURI}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	if ok && name != "" && h1.ValidName(name) {
		switch kind {
		case "header":
			return HashKey{from: keyHeader, name: name}, nil
		case "cookie":
			return HashKey{from: keyCookie, name: name}, nil
		}
	}
	return HashKey{}, fmt.Errorf("balance: %w %q (want client_ip, header:NAME, cookie:NAME or uri)", ErrHashKey, s)
}

// String returns the key in ParseHashKey's syntax ("" for the zero value).
func (k HashKey) String() string {
	switch k.from {
	case keyClientIP:
		return "client_ip"
	case keyHeader:
		return "header:" + k.name
	case keyCookie:
		return "cookie:" + k.name
	case keyURI:
		return "uri"
	}
	return ""
}

// Append appends the key of a request from client to dst and returns the
// extended slice; it appends nothing when the request has no such key (no
// such header or cookie, an invalid client address), which Hash treats as
// "no key". It does not allocate when dst has room.
//
//   - client_ip: client's address in its text form;
//   - header:NAME: the value of the first NAME field (names compare
//     case-insensitively);
//   - cookie:NAME: the value of the first NAME cookie in the Cookie fields
//     (names compare case-sensitively, RFC 6265 §5.4);
//   - uri: the request target as received, query included.
func (k HashKey) Append(dst []byte, client netip.Addr, req *h1.Request) []byte {
	switch k.from {
	case keyClientIP:
		if client.IsValid() {
			return client.Unmap().AppendTo(dst)
		}
	case keyHeader:
		return append(dst, req.Header.Get(k.name)...)
	case keyCookie:
		h := &req.Header
		for i := range h.Len() {
			if !h1.EqualFold(h.Name(i), "Cookie") {
				continue
			}
			if v, ok := cookieValue(h.Value(i), k.name); ok {
				return append(dst, v...)
			}
		}
	case keyURI:
		return append(dst, req.Target()...)
	}
	return dst
}

// cookieValue finds cookie name in a Cookie field value
// ("a=1; b=2", RFC 6265 §4.2.1).
func cookieValue(v []byte, name string) ([]byte, bool) {
	for len(v) > 0 {
		var pair []byte
		if i := bytes.IndexByte(v, ';'); i >= 0 {
			pair, v = v[:i], v[i+1:]
		} else {
			pair, v = v, nil
		}
		pair = bytes.TrimSpace(pair)
		n, val, ok := bytes.Cut(pair, []byte{'='})
		if ok && string(n) == name {
			return val, true
		}
	}
	return nil, false
}
