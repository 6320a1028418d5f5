package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/sluice-proxy/sluice/h1"
)

// Vary (RFC 9111 §4.1): a response that varies is stored under its
// primary key's variant for the values its request had of the fields it
// names. The primary key then holds a marker naming those fields, so that
// a later request finds its variant with one more look-up.

// varyNames returns the field names a response's Vary fields list,
// lower-cased, sorted and each once; star reports a "*" among them (such
// a response always fails to match: §4.1).
func varyNames(h *h1.Header) (names []string, star bool) {
	for i := 0; i < h.Len(); i++ {
		if !h1.EqualFold(h.Name(i), "Vary") {
			continue
		}
		for v := h.Value(i); len(v) > 0; {
			var item []byte
			item, v = h1.CutList(v)
			switch {
			case len(item) == 0:
			case len(item) == 1 && item[0] == '*':
				star = true
			default:
				name := strings.ToLower(string(item))
				if !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
		}
	}
	slices.Sort(names)
	return names, star
}

// variance returns the variant key of a request for a response that varies
// on names (sorted, lower-case): primary and a digest of the request's
// values of those fields, normalized (normalizeField), an absent field
// apart from an empty one.
func variance(primary string, req *h1.Header, names []string) string {
	h := sha256.New()
	var buf, val []byte
	for _, name := range names {
		var present bool
		val, present = normalizeField(val[:0], req, name)
		buf = append(buf[:0], name...)
		buf = append(buf, 0)
		if present {
			buf = append(buf, 1)
			buf = append(buf, val...)
		} else {
			buf = append(buf, 0)
		}
		buf = append(buf, 0)
		h.Write(buf)
	}
	var sum [sha256.Size]byte
	var hexd [32]byte
	hex.Encode(hexd[:], h.Sum(sum[:0])[:16])
	return primary + "\x00v" + string(hexd[:])
}

// normalizeField appends to dst the value a request has of the field
// name, all its lines as one list, each member without the whitespace
// around it and empty members left out ("a ,b" and "a", "b" alike, as
// RFC 9110 §5.3 makes them); Accept-Language and Accept-Encoding, whose
// members are case-insensitive, lower-cased too. Members keep their order:
// "en, de" and "de, en" say different things.
func normalizeField(dst []byte, req *h1.Header, name string) ([]byte, bool) {
	fold := name == "accept-language" || name == "accept-encoding"
	present := false
	first := true
	for i := 0; i < req.Len(); i++ {
		if !h1.EqualFold(req.Name(i), name) {
			continue
		}
		present = true
		for v := req.Value(i); len(v) > 0; {
			var item []byte
			item, v = h1.CutList(v)
			if len(item) == 0 {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			n := len(dst)
			dst = append(dst, item...)
			if fold {
				lower(dst[n:])
			}
		}
	}
	return dst, present
}

// lower lower-cases ASCII letters in place.
func lower(b []byte) {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
}

// sameVary reports whether two sorted lists of field names are the same.
func sameVary(a, b []string) bool { return slices.Equal(a, b) }

// varyValue returns a Vary field value for names.
func varyValue(names []string) []byte {
	var b bytes.Buffer
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(n)
	}
	return b.Bytes()
}
