package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"net/netip"
	"strings"

	"github.com/sluice-proxy/sluice/h1"
)

// MaxKeyLen is the longest idempotency key taken, in bytes: Stripe's
// bound, which clients written for it respect.
const MaxKeyLen = 255

// KeyError says why a request's idempotency key was refused; the request
// is answered 400 with Reason in the problem's detail.
type KeyError struct {
	// Reason completes "the Idempotency-Key field ...": "is empty", say.
	Reason string
}

func (e *KeyError) Error() string { return "idempotency key " + e.Reason }

var (
	errKeyEmpty    = &KeyError{"is empty"}
	errKeyLong     = &KeyError{"is longer than 255 bytes"}
	errKeyByte     = &KeyError{"holds a byte that is not printable ASCII"}
	errKeyString   = &KeyError{"is a malformed quoted string (RFC 8941 §3.3.3)"}
	errKeyTwice    = &KeyError{"is given more than once"}
	errKeyNotFound = errors.New("idempotency key missing")
)

// ParseKeyValue validates the value of an idempotency key field and
// returns the key it carries. Two forms are taken:
//
//   - a Structured Field String (RFC 8941 §3.3.3), as the IETF draft
//     (draft-ietf-httpapi-idempotency-key-header) writes the field:
//     "8e03978e-40d5"; the key is what the quotes hold, with \" and \\
//     unescaped;
//   - a bare value, as Stripe's clients send it: 8e03978e-40d5.
//
// The key must be 1 to MaxKeyLen bytes of printable ASCII (0x20 to 0x7E).
// A value that starts with a quote is read as a string and must be one.
// The returned slice aliases v when v is bare, and is a new one when an
// escape had to be removed. An error is a *KeyError.
func ParseKeyValue(v []byte) ([]byte, error) {
	if len(v) == 0 {
		return nil, errKeyEmpty
	}
	if v[0] != '"' {
		if len(v) > MaxKeyLen {
			return nil, errKeyLong
		}
		for _, c := range v {
			if c < 0x20 || c > 0x7e {
				return nil, errKeyByte
			}
		}
		return v, nil
	}
	// RFC 8941 §4.2.5: chars up to the closing quote, an escape only
	// before '"' or '\', nothing after the closing quote.
	key := v[1:]
	escaped := false
	var out []byte
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return nil, errKeyString
			}
			if !escaped {
				escaped = true
				out = append(make([]byte, 0, len(v)), v[1:i-1]...)
			}
			out = append(out, v[i])
		case c == '"':
			if i != len(v)-1 {
				return nil, errKeyString
			}
			if escaped {
				key = out
			} else {
				key = v[1:i]
			}
			switch {
			case len(key) == 0:
				return nil, errKeyEmpty
			case len(key) > MaxKeyLen:
				return nil, errKeyLong
			}
			return key, nil
		case c < 0x20 || c > 0x7e:
			return nil, errKeyByte
		default:
			if escaped {
				out = append(out, c)
			}
		}
	}
	return nil, errKeyString // no closing quote
}

// keyField returns the key of the request's field named name: its one
// value, validated. A request without the field gets errKeyNotFound; one
// with two fields of the name, errKeyTwice (which is the one meant?). at
// is the index of the first field of the name when the caller knows it,
// else -1.
func keyField(h *h1.Header, name string, at int) ([]byte, error) {
	if at < 0 {
		at = h.Index(name)
	}
	if at < 0 {
		return nil, errKeyNotFound
	}
	for i := at + 1; i < h.Len(); i++ {
		if h1.EqualFold(h.Name(i), name) {
			return nil, errKeyTwice
		}
	}
	return ParseKeyValue(h.Value(at))
}

// scopeKind is what a Scope adds to a key.
type scopeKind uint8

const (
	scopeRoute scopeKind = iota + 1
	scopeClientIP
	scopeHeader
)

// Scope is one attribute of a request that, besides the key itself, says
// whose the key is, so that one client cannot reach another's answers by
// sending its key (the IETF draft's security advice). The zero Scope is
// not valid; make one with ParseScope or use ScopeRoute, ScopeClientIP,
// ScopeHeader.
type Scope struct {
	kind scopeKind
	name string // the header's name, for scopeHeader
}

var (
	// ScopeRoute scopes keys to the Layer's route (Options.Name): the
	// same key on two routes names two requests.
	ScopeRoute = Scope{kind: scopeRoute}
	// ScopeClientIP scopes keys to the client's address; an IPv6
	// client's /64, so that a host whose temporary address changes
	// between a request and its retry keeps its keys. A client whose
	// network changes between them (Wi-Fi to cellular) loses them: scope
	// by a credential (ScopeHeader("Authorization")) where there is one.
	ScopeClientIP = Scope{kind: scopeClientIP}
)

// ScopeHeader scopes keys to the values of the request's fields named
// name (an API key, a session, Authorization): a request without the
// field is scoped to "none", apart from every value. The values enter the
// key only as SHA-256 digests, and the key itself is a digest: no store
// holds a credential. name must be a field name (ParseScope checks).
func ScopeHeader(name string) Scope { return Scope{kind: scopeHeader, name: name} }

// String returns the scope as the config writes it.
func (s Scope) String() string {
	switch s.kind {
	case scopeRoute:
		return "route"
	case scopeClientIP:
		return "client_ip"
	case scopeHeader:
		return "header:" + s.name
	}
	return "invalid"
}

// ParseScope reads a scope as the config writes it: "route", "client_ip"
// or "header:NAME" with NAME a field name (RFC 9110 §5.1, a token).
func ParseScope(s string) (Scope, error) {
	switch s {
	case "route":
		return ScopeRoute, nil
	case "client_ip":
		return ScopeClientIP, nil
	}
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		if !validFieldName(name) {
			return Scope{}, errors.New("header:NAME needs NAME to be a header field name (RFC 9110 §5.1)")
		}
		return ScopeHeader(name), nil
	}
	return Scope{}, errors.New("unknown scope: want route, client_ip or header:NAME")
}

// validFieldName reports whether name is a field name (RFC 9110 §5.1: a
// token).
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// Key names one idempotency key in a store: a SHA-256 digest of the key
// and the values of its scope. It has a fixed length whatever the key and
// scope, and holds neither in the clear.
type Key [sha256.Size]byte

// String returns the key in hex, as the Redis store writes it.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// keyVersion starts every key digest: a change in how keys are made
// changes it, so that new keys never meet old records.
const keyVersion = "sluice idempotency key v1\x00"

// makeKey derives the store key of key under the scopes, for route and
// the request's client and fields. Each part is written with its length
// (or count) first, so that no two different scope values and keys make
// the same input.
func makeKey(scopes []Scope, route string, client netip.Addr, h *h1.Header, key []byte) Key {
	var arr [512]byte
	b := append(arr[:0], keyVersion...)
	for _, s := range scopes {
		b = append(b, byte(s.kind))
		switch s.kind {
		case scopeRoute:
			b = appendPart(b, route)
		case scopeClientIP:
			var ab [24]byte
			b = appendPart(b, appendClient(ab[:0], client))
		case scopeHeader:
			b = appendPart(b, s.name)
			n := 0
			for i := 0; i < h.Len(); i++ {
				if h1.EqualFold(h.Name(i), s.name) {
					n++
				}
			}
			b = binary.AppendUvarint(b, uint64(n))
			for i := 0; i < h.Len(); i++ {
				if h1.EqualFold(h.Name(i), s.name) {
					sum := sha256.Sum256(h.Value(i))
					b = append(b, sum[:]...)
				}
			}
		}
	}
	b = appendPart(b, key)
	return sha256.Sum256(b)
}

func appendPart[S string | []byte](b []byte, s S) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendClient appends the client's address as keys scope it: an
// IPv4-mapped address as IPv4, an IPv6 one as its /64, none as "".
func appendClient(dst []byte, a netip.Addr) []byte {
	switch {
	case !a.IsValid():
		return dst
	case a.Is4In6():
		return a.Unmap().AppendTo(dst)
	case a.Is6():
		b := a.As16()
		clear(b[8:])
		return append(netip.AddrFrom16(b).AppendTo(dst), "/64"...)
	}
	return a.AppendTo(dst)
}

// BodyDigest is the SHA-256 digest of a request body, fed as the body is
// read so that no copy of it is needed: the engine writes every byte of
// the body to it, in order, then hands it to Layer.Begin in
// Request.Body. The zero value is ready to use and digests an empty body.
// A BodyDigest is not safe for concurrent use.
type BodyDigest struct {
	h   hash.Hash
	n   int64
	sum [sha256.Size]byte // Sum's: the hash appends to it, not to a new slice
}

// Write adds p to the digest. It never fails.
func (d *BodyDigest) Write(p []byte) (int, error) {
	if d.h == nil {
		d.h = sha256.New()
	}
	d.n += int64(len(p))
	return d.h.Write(p)
}

// Len returns the number of bytes written.
func (d *BodyDigest) Len() int64 { return d.n }

// Sum returns the digest of what was written; Write may go on after it.
func (d *BodyDigest) Sum() [sha256.Size]byte {
	if d == nil || d.h == nil {
		return emptyBody
	}
	d.h.Sum(d.sum[:0])
	return d.sum
}

// emptyBody is the SHA-256 digest of no bytes.
var emptyBody = sha256.Sum256(nil)

// Fingerprint identifies a request's payload: a SHA-256 digest of its
// method, its host, its target and its body's digest. A key used again
// with another fingerprint is answered 422.
type Fingerprint [sha256.Size]byte

// fingerprintVersion starts every fingerprint's input.
const fingerprintVersion = "sluice idempotency fingerprint v1\x00"

// fingerprint computes the request's payload fingerprint. The host is
// the Host field's value, lower-cased (RFC 9110 §4.2.3: hosts compare
// without case); a request that has none (HTTP/1.0) has "".
func fingerprint(r *Request) Fingerprint {
	var arr [512]byte
	b := append(arr[:0], fingerprintVersion...)
	b = appendPart(b, r.Method)
	var host []byte
	if r.Header != nil {
		host = r.Header.Get("Host")
	}
	b = binary.AppendUvarint(b, uint64(len(host)))
	at := len(b)
	b = append(b, host...)
	for i, c := range b[at:] {
		if 'A' <= c && c <= 'Z' {
			b[at+i] = c + 'a' - 'A'
		}
	}
	b = appendPart(b, r.Target)
	var body [sha256.Size]byte
	if r.body != nil {
		body = sha256.Sum256(r.body)
	} else {
		body = r.Body.Sum()
	}
	b = append(b, body[:]...)
	return sha256.Sum256(b)
}
