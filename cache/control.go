package cache

import (
	"bytes"

	"github.com/sluice-proxy/sluice/h1"
)

// Cache-Control (RFC 9111 §5.2) and Surrogate-Control (the W3C Edge
// Architecture note, as Fastly and Akamai read it) parsing.

// deltaMax is what a delta-seconds value too large to represent counts as
// (RFC 9111 §1.2.2): 2^31 seconds, some 68 years.
const deltaMax = 1 << 31

// Response directives: bits of directives.flags.
const (
	dirNoStore uint32 = 1 << iota
	dirNoCache        // unqualified: every use is revalidated
	dirPrivate        // unqualified: a shared cache must not store
	dirPublic
	dirMustRevalidate
	dirProxyRevalidate
	dirMustUnderstand
	dirNoTransform
	dirImmutable
	dirOnlyIfCached // a request's
	// dirMaxAgeBad and dirSMaxAgeBad mark a directive whose argument is
	// not a delta-seconds: the response is then stale (RFC 9111 §4.2.1
	// encourages it; the -3600 and '3600' of the suite's tests must not
	// be reused).
	dirMaxAgeBad
	dirSMaxAgeBad
)

// directives is a parsed Cache-Control (or Surrogate-Control) field. A
// delta-seconds directive absent is -1. The first occurrence of a
// directive counts (RFC 9111 §4.2.1); fields' lines are one list.
type directives struct {
	flags                uint32
	maxAge               int64
	sMaxAge              int64
	staleIfError         int64
	staleWhileRevalidate int64
	// noCacheFields and privateFields are the field names of the
	// qualified forms (no-cache="Set-Cookie"), lower-cased: those fields
	// are not stored, the rest of the response may be.
	noCacheFields []string
	privateFields []string
	// any is set when at least one directive was found.
	any bool
}

func (d *directives) has(f uint32) bool { return d.flags&f != 0 }

// reset makes d empty, keeping its slices' storage.
func (d *directives) reset() {
	*d = directives{maxAge: -1, sMaxAge: -1, staleIfError: -1, staleWhileRevalidate: -1,
		noCacheFields: d.noCacheFields[:0], privateFields: d.privateFields[:0]}
}

// parseCacheControl parses every Cache-Control field of h into d.
func parseCacheControl(d *directives, h *h1.Header) {
	d.reset()
	for i := 0; i < h.Len(); i++ {
		if h1.EqualFold(h.Name(i), "Cache-Control") {
			parseDirectives(d, h.Value(i), "")
		}
	}
}

// parseDirectives adds the directives of one field value to d. With a
// device token (Surrogate-Control), a directive targeted at another device
// ("max-age=60;other") is left out, and one targeted at token kept.
func parseDirectives(d *directives, v []byte, token string) {
	for len(v) > 0 {
		var name, arg []byte
		var quoted, ok bool
		name, arg, quoted, v, ok = nextDirective(v)
		if !ok {
			continue
		}
		if token == "" {
			if bytes.IndexByte(name, ';') >= 0 {
				continue // a target in Cache-Control: not a directive
			}
		} else {
			// Surrogate-Control: "max-age=3600;target"; the target
			// follows the argument (or the name, without one).
			var target []byte
			if i := bytes.IndexByte(arg, ';'); i >= 0 && !quoted {
				arg, target = arg[:i], arg[i+1:]
			} else if i := bytes.IndexByte(name, ';'); i >= 0 {
				name, target = name[:i], name[i+1:]
			}
			if target != nil && !h1.EqualFold(target, token) {
				continue
			}
		}
		d.any = true
		d.add(name, arg, quoted)
	}
}

// add records one directive.
func (d *directives) add(name, arg []byte, quoted bool) {
	switch {
	case h1.EqualFold(name, "max-age"):
		if d.maxAge < 0 && !d.has(dirMaxAgeBad) {
			if n, ok := deltaSeconds(arg, quoted); ok {
				d.maxAge = n
			} else {
				d.flags |= dirMaxAgeBad
			}
		}
	case h1.EqualFold(name, "s-maxage"):
		if d.sMaxAge < 0 && !d.has(dirSMaxAgeBad) {
			if n, ok := deltaSeconds(arg, quoted); ok {
				d.sMaxAge = n
			} else {
				d.flags |= dirSMaxAgeBad
			}
		}
	case h1.EqualFold(name, "stale-if-error"):
		if n, ok := deltaSeconds(arg, quoted); ok && d.staleIfError < 0 {
			d.staleIfError = n
		}
	case h1.EqualFold(name, "stale-while-revalidate"):
		if n, ok := deltaSeconds(arg, quoted); ok && d.staleWhileRevalidate < 0 {
			d.staleWhileRevalidate = n
		}
	case h1.EqualFold(name, "no-store"):
		d.flags |= dirNoStore
	case h1.EqualFold(name, "no-cache"):
		if arg == nil {
			d.flags |= dirNoCache
		} else {
			d.noCacheFields = appendFieldNames(d.noCacheFields, arg)
		}
	case h1.EqualFold(name, "private"):
		if arg == nil {
			d.flags |= dirPrivate
		} else {
			d.privateFields = appendFieldNames(d.privateFields, arg)
		}
	case h1.EqualFold(name, "public"):
		d.flags |= dirPublic
	case h1.EqualFold(name, "must-revalidate"):
		d.flags |= dirMustRevalidate
	case h1.EqualFold(name, "proxy-revalidate"):
		d.flags |= dirProxyRevalidate
	case h1.EqualFold(name, "must-understand"):
		d.flags |= dirMustUnderstand
	case h1.EqualFold(name, "no-transform"):
		d.flags |= dirNoTransform
	case h1.EqualFold(name, "immutable"):
		d.flags |= dirImmutable
	case h1.EqualFold(name, "only-if-cached"):
		d.flags |= dirOnlyIfCached
	}
}

// nextDirective cuts the first directive off the list v: its name, its
// argument (nil when it has none; a quoted-string's unescaped), and the rest
// of the list. A list element that is not a directive (a stray quote, a
// space before "=") is passed over, ok false, up to the next comma outside
// a quoted string: "max-age =3600" is not max-age (RFC 9111 §5.2 allows no
// whitespace around "=").
func nextDirective(v []byte) (name, arg []byte, quoted bool, rest []byte, ok bool) {
	i := skipOWS(v, 0)
	start := i
	for i < len(v) && isTokenByte(v[i]) || i < len(v) && v[i] == ';' {
		i++
	}
	name = v[start:i]
	ok = len(name) > 0
	if i < len(v) && v[i] == '=' {
		i++
		if i < len(v) && v[i] == '"' {
			var end int
			arg, end, ok = unquote(v, i)
			if !ok {
				return nil, nil, false, nil, false // unterminated: the rest is in the string
			}
			quoted = true
			i = end
			// A target after a quoted argument ("x";dev) is kept in the
			// name's place for Surrogate-Control's reader.
			if i < len(v) && v[i] == ';' {
				j := i + 1
				for j < len(v) && isTokenByte(v[j]) {
					j++
				}
				name = append(append(append([]byte(nil), name...), ';'), v[i+1:j]...)
				i = j
			}
		} else {
			s := i
			for i < len(v) && (isTokenByte(v[i]) || v[i] == ';' || v[i] == '+') {
				i++
			}
			arg = v[s:i]
			if len(arg) == 0 {
				ok = false // "max-age=" or "max-age= 3600"
			}
		}
	}
	j := skipOWS(v, i)
	if j < len(v) && v[j] != ',' {
		ok = false // junk after the directive
	}
	// Move to the element after the next comma outside a quoted string.
	for j < len(v) && v[j] != ',' {
		if v[j] == '"' {
			if _, end, closed := unquote(v, j); closed {
				j = end
				continue
			}
			return name, arg, quoted, nil, false
		}
		j++
	}
	if j < len(v) {
		j++
	}
	return name, arg, quoted, v[j:], ok
}

// unquote reads the quoted-string that starts at v[i] (RFC 9110 §5.6.4),
// returning its content with quoted-pairs resolved, and the index after its
// closing quote.
func unquote(v []byte, i int) (s []byte, end int, ok bool) {
	i++ // the opening quote
	start := i
	var b []byte // only when there is an escape
	for i < len(v) {
		switch c := v[i]; c {
		case '"':
			if b == nil {
				return v[start:i], i + 1, true
			}
			return b, i + 1, true
		case '\\':
			if i+1 >= len(v) {
				return nil, 0, false
			}
			if b == nil {
				b = append([]byte(nil), v[start:i]...)
			}
			b = append(b, v[i+1])
			i += 2
		default:
			if b != nil {
				b = append(b, c)
			}
			i++
		}
	}
	return nil, 0, false
}

// deltaSeconds parses a directive's delta-seconds argument: digits only
// (leading zeros allowed), quoted or not (RFC 9111 §5.2 asks recipients to
// accept both forms); a value too large counts as 2^31 (§1.2.2).
// Surrogate-Control's "60+30" counts as its first number.
func deltaSeconds(arg []byte, quoted bool) (int64, bool) {
	if i := bytes.IndexByte(arg, '+'); i > 0 && !quoted {
		arg = arg[:i]
	}
	if len(arg) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range arg {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < deltaMax {
			n = n*10 + int64(c-'0')
		}
	}
	return min(n, deltaMax), true
}

// appendFieldNames appends the field names of a qualified no-cache or
// private directive ("Set-Cookie, X-Foo"), lower-cased.
func appendFieldNames(dst []string, arg []byte) []string {
	for len(arg) > 0 {
		var item []byte
		item, arg = h1.CutList(arg)
		if len(item) > 0 {
			dst = append(dst, string(bytes.ToLower(item)))
		}
	}
	return dst
}

func skipOWS(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	return i
}

// isTokenByte reports whether c may appear in a token (RFC 9110 §5.6.2).
func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
