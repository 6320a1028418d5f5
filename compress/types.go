package compress

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/sluice-proxy/sluice/h1"
)

// Types is a set of media type patterns a response's Content-Type is
// matched against: "type/subtype" exactly, "type/*" for any subtype, or
// "*/*". Matching ignores case and the Content-Type's parameters
// (charset). The zero value matches nothing.
type Types struct {
	exact  []string // "application/json"
	prefix []string // "text/"
	any    bool
}

// ParseTypes returns the set of patterns, or an error naming the first that
// is not a media type pattern.
func ParseTypes(patterns []string) (Types, error) {
	var t Types
	for _, p := range patterns {
		if err := CheckType(p); err != nil {
			return Types{}, err
		}
		p = strings.ToLower(p)
		switch {
		case p == "*/*":
			t.any = true
		case strings.HasSuffix(p, "/*"):
			t.prefix = append(t.prefix, p[:len(p)-1])
		default:
			t.exact = append(t.exact, p)
		}
	}
	return t, nil
}

// CheckType reports whether p is a media type pattern: type "/" subtype,
// both tokens (RFC 9110 §8.3.1), the subtype "*" for any, and "*/*".
func CheckType(p string) error {
	typ, sub, ok := strings.Cut(p, "/")
	switch {
	case !ok:
		return fmt.Errorf("media type %q: want type/subtype, type/* or */*", p)
	case typ == "*" && sub != "*":
		return fmt.Errorf("media type %q: a wildcard type needs a wildcard subtype (*/*)", p)
	case typ != "*" && !h1.ValidName(typ):
		return fmt.Errorf("media type %q: %q is not a type name", p, typ)
	case sub != "*" && !h1.ValidName(sub):
		return fmt.Errorf("media type %q: %q is not a subtype name", p, sub)
	}
	return nil
}

// Match reports whether the Content-Type value ct is in the set.
func (t *Types) Match(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	slash := bytes.IndexByte(ct, '/')
	if slash <= 0 || slash == len(ct)-1 {
		return false
	}
	if t.any {
		return true
	}
	for _, e := range t.exact {
		if h1.EqualFold(ct, e) {
			return true
		}
	}
	for _, p := range t.prefix {
		if len(ct) > len(p) && h1.EqualFold(ct[:len(p)], p) {
			return true
		}
	}
	return false
}
