package h1

import (
	"bytes"
	"slices"
)

// Header is an ordered list of header fields. Names keep the spelling they
// arrived with and fields keep their order, so a proxied message leaves with
// the bytes it came with; look-ups ignore ASCII case.
//
// All names and values live in one byte arena owned by the Header, so parsing
// a head costs one copy and no allocation once the arena has grown to size.
// Slices returned by Name, Value and Get alias the arena: they are valid until
// the Header is next modified or Reset.
//
// The zero value is an empty Header ready to use. A Header is not safe for
// concurrent use.
type Header struct {
	arena  []byte
	fields []field
	// names has the bit of each name added (nameBit), so that a look-up
	// of a name absent (most of them: a proxy asks after many fields a
	// message rarely has) returns without reading the fields. Removing a
	// field leaves its bit: a bit set only means "maybe".
	names uint64
}

// nameBit is a name's bit in Header.names: from its length and its first
// and last letters, case folded (|0x20 keeps any two bytes that fold
// equal equal).
func nameBit[S string | []byte](name S) uint64 {
	n := len(name)
	if n == 0 {
		return 1
	}
	return 1 << ((uint(name[0]|0x20) ^ uint(name[n-1]|0x20)<<1 ^ uint(n)*7) & 63)
}

// field locates one name and value in the arena.
type field struct {
	n0, n1, v0, v1 int32
}

// Len reports the number of fields.
func (h *Header) Len() int { return len(h.fields) }

// Name returns the name of field i as it was spelled.
func (h *Header) Name(i int) []byte {
	f := h.fields[i]
	return h.arena[f.n0:f.n1]
}

// Value returns the value of field i, without surrounding whitespace.
func (h *Header) Value(i int) []byte {
	f := h.fields[i]
	return h.arena[f.v0:f.v1]
}

// Index returns the index of the first field named name, or -1.
func (h *Header) Index(name string) int {
	if name == "" {
		return -1
	}
	// Fields whose names differ in length or first letter (the most of
	// them, for a look-up that runs many times per message) are passed
	// over without a compare. (|0x20 folds a letter's case, and keeps
	// any two bytes that fold equal equal.)
	if h.names&nameBit(name) == 0 {
		return -1
	}
	n, c := int32(len(name)), name[0]|0x20
	for i, f := range h.fields {
		if f.n1-f.n0 == n && h.arena[f.n0]|0x20 == c && equalFold(h.arena[f.n0:f.n1], name) {
			return i
		}
	}
	return -1
}

// Get returns the value of the first field named name, or nil.
func (h *Header) Get(name string) []byte {
	if i := h.Index(name); i >= 0 {
		return h.Value(i)
	}
	return nil
}

// Has reports whether a field named name is present.
func (h *Header) Has(name string) bool { return h.Index(name) >= 0 }

// Count reports how many fields are named name.
func (h *Header) Count(name string) int {
	n := 0
	if h.names&nameBit(name) == 0 {
		return 0
	}
	for _, f := range h.fields {
		if equalFold(h.arena[f.n0:f.n1], name) {
			n++
		}
	}
	return n
}

// Add appends a field. The name and value are not validated; callers that
// take them from untrusted input must check them with ValidName and
// ValidValue.
func (h *Header) Add(name, value string) {
	addField(h, name, value)
	h.markLast()
}

// AddBytes is Add for byte slices. The slices may alias h's own arena: a
// grown arena leaves the old array, and so the source bytes, untouched.
func (h *Header) AddBytes(name, value []byte) {
	addField(h, name, value)
	h.markLast()
}

func addField[S string | []byte](h *Header, name, value S) {
	f := field{n0: int32(len(h.arena))}
	h.arena = append(h.arena, name...)
	f.n1 = int32(len(h.arena))
	f.v0 = f.n1
	h.arena = append(h.arena, value...)
	f.v1 = int32(len(h.arena))
	h.fields = append(h.fields, f)
}

// markLast sets the bit of the last field's name in h.names. Add and
// AddBytes call it after addField, not addField itself: addField must stay
// small enough to be inlined, or a []byte made from a constant
// ([]byte("Age")) and given to it escapes to the heap, an allocation for
// each field a cached answer adds.
func (h *Header) markLast() {
	f := h.fields[len(h.fields)-1]
	h.names |= nameBit(h.arena[f.n0:f.n1])
}

// Set gives the first field named name the value, keeping its position and
// spelling, and removes any other field of that name. It appends a field when
// there is none.
func (h *Header) Set(name, value string) {
	i := h.Index(name)
	if i < 0 {
		h.Add(name, value)
		return
	}
	f := &h.fields[i]
	f.v0 = int32(len(h.arena))
	h.arena = append(h.arena, value...)
	f.v1 = int32(len(h.arena))
	h.delFrom(name, i+1)
}

// Del removes every field named name and reports how many there were.
func (h *Header) Del(name string) int { return h.delFrom(name, 0) }

func (h *Header) delFrom(name string, from int) int {
	if h.names&nameBit(name) == 0 {
		return 0
	}
	kept := h.fields[:from]
	for _, f := range h.fields[from:] {
		if !equalFold(h.arena[f.n0:f.n1], name) {
			kept = append(kept, f)
		}
	}
	n := len(h.fields) - len(kept)
	h.fields = kept
	return n
}

// DelAt removes field i.
func (h *Header) DelAt(i int) {
	h.fields = append(h.fields[:i], h.fields[i+1:]...)
}

// Grow makes room for n more fields whose names and values hold size
// bytes in all, so that adding them allocates nothing: a header built
// field by field (an answer sluice makes) then costs two allocations, not
// one for each time its storage doubles.
func (h *Header) Grow(n, size int) {
	h.arena = slices.Grow(h.arena, size)
	h.fields = slices.Grow(h.fields, n)
}

// Reset empties h, keeping its storage for reuse.
func (h *Header) Reset() {
	h.arena = h.arena[:0]
	h.fields = h.fields[:0]
	h.names = 0
}

// CopyFrom makes h a copy of src.
func (h *Header) CopyFrom(src *Header) {
	h.arena = append(h.arena[:0], src.arena...)
	h.fields = append(h.fields[:0], src.fields...)
	h.names = src.names
}

// HasToken reports whether any field named name carries token in its
// comma-separated list, ignoring case (RFC 9110 §5.6.1), as in
// "Connection: keep-alive, Upgrade".
func (h *Header) HasToken(name, token string) bool {
	if h.names&nameBit(name) == 0 {
		return false
	}
	for _, f := range h.fields {
		if equalFold(h.arena[f.n0:f.n1], name) && hasToken(h.arena[f.v0:f.v1], token) {
			return true
		}
	}
	return false
}

// AppendTo appends the fields in wire form, each followed by CRLF.
func (h *Header) AppendTo(dst []byte) []byte {
	a := h.arena
	for i := 0; i < len(h.fields); {
		f := h.fields[i]
		if !onWire(a, f) {
			dst = append(dst, a[f.n0:f.n1]...)
			dst = append(dst, ':', ' ')
			dst = append(dst, a[f.v0:f.v1]...)
			dst = append(dst, '\r', '\n')
			i++
			continue
		}
		// A run of fields that lie in the arena as they go on the wire,
		// one after the other (as parsed from a head written that way),
		// is copied whole.
		end := f.v1 + 2
		for i++; i < len(h.fields) && h.fields[i].n0 == end && onWire(a, h.fields[i]); i++ {
			end = h.fields[i].v1 + 2
		}
		dst = append(dst, a[f.n0:end]...)
	}
	return dst
}

// onWire reports whether f's bytes in the arena a are its wire form,
// "name: value" and CRLF, as AppendTo would write it.
func onWire(a []byte, f field) bool {
	return f.v0 == f.n1+2 && a[f.n1] == ':' && a[f.n1+1] == ' ' &&
		int(f.v1)+2 <= len(a) && a[f.v1] == '\r' && a[f.v1+1] == '\n'
}

// String returns the fields in wire form, for debugging and tests.
func (h *Header) String() string { return string(h.AppendTo(nil)) }

// CutList returns the first element of a comma-separated field value
// (RFC 9110 §5.6.1), without surrounding whitespace, and the rest of the
// list. An element may be empty. Loop while the rest is not empty:
//
//	for v := h.Get("Connection"); len(v) > 0; {
//		var item []byte
//		item, v = h1.CutList(v)
//		...
//	}
func CutList(v []byte) (item, rest []byte) {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		return trimOWS(v[:i]), v[i+1:]
	}
	return trimOWS(v), nil
}

// hasToken reports whether the comma-separated list v holds token.
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var item []byte
		item, v = CutList(v)
		if equalFold(item, token) {
			return true
		}
	}
	return false
}

// equalFold reports whether b and s are equal under ASCII case folding.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := b[i], s[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// EqualFold reports whether b and s are equal under ASCII case folding.
func EqualFold(b []byte, s string) bool { return equalFold(b, s) }

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
