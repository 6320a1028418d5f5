package h2

import (
	"math/bits"
	"strings"
	"sync"

	"golang.org/x/net/http2/hpack"
)

// The HPACK encoder (RFC 7541) of the header blocks either end writes.
// The peer's blocks are decoded by x/net's hpack.Decoder; this side is
// sluice's own, so that a field found in a table costs a hash of a few
// words and a comparison of strings instead of the map look-ups (hashing
// each string whole) of x/net's encoder, for every field of every block.

// maxTableSize bounds the dynamic table an encoder keeps, whatever more
// the peer's SETTINGS_HEADER_TABLE_SIZE allows: 4096 bytes (§4.1's
// measure), the protocol's initial size, which holds the fields a
// connection repeats; a larger one would cost each connection memory for
// fields seldom seen twice.
const maxTableSize = 4096

// entryOverhead is what a dynamic table entry counts beyond its name and
// value (§4.1).
const entryOverhead = 32

// A table holds at most maxTableSize/entryOverhead entries, which the
// slots' 8-bit insertion numbers (dynTable) tell apart.
const _ uint8 = maxTableSize / entryOverhead

// headerEncoder is a connection's HPACK encoder: the dynamic table it
// shares with the peer's decoder and the maximum size of that table. The
// write lock guards it. The zero value is an encoder with an empty table
// of maxTableSize bytes, the peer's decoder's initial size (RFC 9113
// §6.5.2).
type headerEncoder struct {
	t *dynTable // nil while the table is empty: before its first entry, after release
	// cut is maxTableSize less the table's maximum size (§4.2), so
	// that the zero value's is maxTableSize.
	cut uint16
	// low is the smallest maximum size the table had since the last
	// block, while update is set.
	low uint16
	// update: the next block starts with dynamic table size updates
	// (§6.3); see encode.
	update bool
	// plain: strings go as they are, never Huffman-coded, for tests
	// against the examples of RFC 7541 Appendix C.3 and C.5.
	plain bool
}

// maxSize returns the dynamic table's maximum size.
func (h *headerEncoder) maxSize() uint32 { return maxTableSize - uint32(h.cut) }

// setLimit applies the peer's SETTINGS_HEADER_TABLE_SIZE, v: the table's
// maximum size becomes v, within maxTableSize. Entries that no longer fit
// are evicted now, and the next block signals the change (§4.2; see
// encode), which the peer's decoder, having sent v, must accept from our
// SETTINGS acknowledgement on.
func (h *headerEncoder) setLimit(v uint32) {
	size := min(v, maxTableSize)
	if size == h.maxSize() {
		return
	}
	if !h.update || size < uint32(h.low) {
		h.low = uint16(size)
	}
	h.update = true
	h.cut = uint16(maxTableSize - size)
	if h.t != nil {
		h.t.evictTo(size)
	}
}

// release lets go of the dynamic table, for a connection that idles: it is
// most of what an idle connection would hold of HPACK's. When it held
// entries, the next block starts with size updates to 0 and back (§4.2,
// §6.3), which empty the peer's table of what the old one held, so that
// both sides agree again; the maximum size stays what it was.
func (h *headerEncoder) release() {
	t := h.t
	if t == nil {
		return
	}
	h.t = nil
	if t.n > 0 {
		h.low, h.update = 0, true
	}
	t.reset()
	tables.Put(t)
}

// encode appends the header block of fields to b: the size updates owed
// first, then each field.
//
// When the table's maximum size went below what it is now since the last
// block, §4.2 asks for two updates: the smallest size, then the current.
// The first is 0, which empties the table: no larger than the smallest, it
// serves as well, and x/net's decoder (Go's HTTP/2 clients and servers)
// takes a second update only when the first left its table empty.
func (h *headerEncoder) encode(b []byte, fields []hpack.HeaderField) []byte {
	if h.update {
		h.update = false
		size := h.maxSize()
		if uint32(h.low) < size {
			b = append(b, 0x20)
			if h.t != nil {
				h.t.evictTo(0)
			}
		}
		b = appendInt(b, 5, 0x20, uint64(size))
	}
	for i := range fields {
		f := &fields[i]
		if f.Sensitive && strings.HasPrefix(f.Name, "x-") {
			b = appendNeverIndexed(b, f.Name, f.Value)
			continue
		}
		b = h.appendField(b, f)
	}
	return b
}

// appendField appends the representation of f (§6): indexed when a table
// holds it, name and value; else a literal, with the name's index when a
// table holds the name, added to the dynamic table unless f is sensitive
// (never indexed, §6.2.3, so that the next hop does not index it either,
// §7.1.3), its entry would not fit, or it is a field whose values mostly
// change from one message to the next (see varies) and its value was not
// seen lately.
//
// The static table is looked in first for a pseudo-header field, whose
// common values it holds (:status 200, :method GET); the dynamic table
// first for the others, which after a connection's first blocks it
// mostly holds whole.
func (h *headerEncoder) appendField(b []byte, f *hpack.HeaderField) []byte {
	name, value := f.Name, f.Value
	var idx uint64
	var exact bool
	pseudo := len(name) > 0 && name[0] == ':'
	if pseudo {
		if idx, exact = staticIndex(name, value); exact && !f.Sensitive {
			return appendInt(b, 7, 0x80, idx)
		}
	}
	t := h.t
	var nh, fh uint64
	if t != nil {
		nh = strHash(name)
		fh = fieldHash(nh, value)
		if !f.Sensitive {
			if i := t.find(fh, name, value); i != 0 {
				return appendInt(b, 7, 0x80, i)
			}
		}
	}
	if !pseudo {
		if idx, exact = staticIndex(name, value); exact && !f.Sensitive {
			return appendInt(b, 7, 0x80, idx)
		}
	}
	if idx == 0 && t != nil {
		idx = t.findName(nh, name)
	}
	if f.Sensitive {
		return h.appendLiteral(b, 4, 0x10, idx, name, value)
	}
	size := len(name) + len(value) + entryOverhead
	if size > int(h.maxSize()) {
		// §4.4: the entry would empty the table and not be kept.
		return h.appendLiteral(b, 4, 0x00, idx, name, value)
	}
	if t == nil {
		t = tables.Get().(*dynTable)
		h.t = t
		nh = strHash(name)
		fh = fieldHash(nh, value)
	}
	if varies(idx) && !t.seenBefore(fh) {
		return h.appendLiteral(b, 4, 0x00, idx, name, value)
	}
	b = h.appendLiteral(b, 6, 0x40, idx, name, value)
	t.add(nh, fh, name, value, uint32(size), h.maxSize())
	return b
}

// varies reports whether the field of static name index idx is one whose
// value mostly changes from one message to the next: :path, age,
// content-length, content-range, etag, if-modified-since, if-none-match,
// last-modified. Its value enters the dynamic table only when seen a
// second time (dynTable.seenBefore): then it is likely to come again (the
// length of a resource asked for again and again), and a value seen once
// neither costs an insertion nor pushes out of the table the entries
// that come again. Measured (BenchmarkHeaderEncoder, six response
// fields), a content-length different each time cost 2,040 instructions
// a block indexed at once, 1,600 never indexed, 1,655 indexed when seen
// again; the same each time, 1,210, 1,507 and 1,246.
func varies(idx uint64) bool {
	switch idx {
	case 4, 21, 28, 30, 34, 40, 41, 44:
		return true
	}
	return false
}

// appendLiteral appends a literal field representation (§6.2): the first
// byte's flags and the name's index as an n-bit prefix integer, then the
// name, when it has no index, and the value.
func (h *headerEncoder) appendLiteral(b []byte, n uint8, flags byte, idx uint64, name, value string) []byte {
	b = appendInt(b, n, flags, idx)
	if idx == 0 {
		b = h.appendString(b, name)
	}
	return h.appendString(b, value)
}

// appendString appends s as a string literal (§5.2): Huffman-coded unless
// that is longer (as RFC 7541's examples code every string).
func (h *headerEncoder) appendString(b []byte, s string) []byte {
	if !h.plain {
		if n := hpack.HuffmanEncodeLength(s); n <= uint64(len(s)) {
			b = appendInt(b, 7, 0x80, n)
			return hpack.AppendHuffmanString(b, s)
		}
	}
	return appendRawString(b, s)
}

// appendInt appends i as an integer with an n-bit prefix (§5.1), the
// first byte's other bits set to flags.
func appendInt(b []byte, n uint8, flags byte, i uint64) []byte {
	limit := uint64(1)<<n - 1
	if i < limit {
		return append(b, flags|byte(i))
	}
	b = append(b, flags|byte(limit))
	for i -= limit; i >= 0x80; i >>= 7 {
		b = append(b, byte(i)|0x80)
	}
	return append(b, byte(i))
}

// appendNeverIndexed appends the field name: value as a literal never
// indexed, with a literal name, both strings as they are (RFC 7541
// §6.2.3, §5.2). For a sensitive field with an "x-" name, which the
// static table does not hold, it is what appendField would write, but for
// the Huffman coding of both strings, which costs more instructions (1,400
// for a request id) than the 13 bytes it saves are worth (and for the
// name's index, were the dynamic table to hold the name). It needs no
// state of the encoder's, and may go anywhere in a block: the size
// updates go before the first field.
func appendNeverIndexed(b []byte, name, value string) []byte {
	b = append(b, 0x10)
	b = appendRawString(b, name)
	return appendRawString(b, value)
}

// appendRawString appends s as a string literal without Huffman coding:
// its length as a 7-bit prefix integer (§5.1), then its bytes.
func appendRawString(b []byte, s string) []byte {
	return append(appendInt(b, 7, 0, uint64(len(s))), s...)
}

// dynTable is the encoder's dynamic table (§2.3.2, §4): its entries, oldest
// evicted first, and two small hash tables that find an entry by name and
// value, and the newest by name alone, without hashing a string whole.
// Each slot holds the low byte of an entry's insertion number: an entry is
// found from the slot a hash picks or the one beside it, and a slot is
// only a hint, checked against the entry it names (which may have been
// evicted, or be another entry with the same low byte, since the table
// holds at most 128). A field not found is written as a literal, which
// costs bytes, never correctness.
type dynTable struct {
	ents []tableEntry // a ring: the entry inserted i-th at ents[i&(len(ents)-1)]
	ins  uint32       // entries inserted so far
	n    uint32       // entries in the table: the last n inserted
	size uint32       // their size (§4.1)

	byField [tableSlots]uint8
	byName  [tableSlots]uint8

	// seen holds tags of the hashes of the fields varies picks out
	// that were seen once and not indexed: one that comes again is.
	seen [seenSlots]uint16
}

type tableEntry struct{ name, value string }

const (
	tableSlotBits = 6
	tableSlots    = 1 << tableSlotBits
	seenSlots     = 16
)

// tables keeps the tables of connections that went idle for those that
// start writing.
var tables = sync.Pool{New: func() any { return new(dynTable) }}

// reset empties t. Its slots need no clearing: they name no entry.
func (t *dynTable) reset() {
	clear(t.ents)
	t.n, t.size = 0, 0
	t.seen = [seenSlots]uint16{}
}

// at returns the entry that slot s names, if it is in the table, and its
// age: 0 for the newest, whose index is 62 (§2.3.3).
func (t *dynTable) at(s uint8) (*tableEntry, uint32, bool) {
	age := uint32(uint8(t.ins-1) - s)
	if age >= t.n {
		return nil, 0, false
	}
	return &t.ents[(t.ins-1-age)&uint32(len(t.ents)-1)], age, true
}

// find returns the index of the entry name: value, fh being its
// fieldHash; 0 when none is found.
func (t *dynTable) find(fh uint64, name, value string) uint64 {
	i := slotOf(fh)
	if e, age, ok := t.at(t.byField[i]); ok && e.value == value && e.name == name {
		return 62 + uint64(age)
	}
	if e, age, ok := t.at(t.byField[i^1]); ok && e.value == value && e.name == name {
		return 62 + uint64(age)
	}
	return 0
}

// findName returns the index of an entry named name, nh being its hash: 0
// when none is found.
func (t *dynTable) findName(nh uint64, name string) uint64 {
	i := slotOf(nh)
	if e, age, ok := t.at(t.byName[i]); ok && e.name == name {
		return 62 + uint64(age)
	}
	if e, age, ok := t.at(t.byName[i^1]); ok && e.name == name {
		return 62 + uint64(age)
	}
	return 0
}

// seenBefore reports whether the field of hash fh was seen by seenBefore
// lately, and remembers it.
func (t *dynTable) seenBefore(fh uint64) bool {
	i, tag := fh>>40&(seenSlots-1), uint16(fh>>16)
	if t.seen[i] == tag {
		return true
	}
	t.seen[i] = tag
	return false
}

// add inserts the entry name: value of size size (at most max, the
// table's maximum size), nh and fh being the hashes of its name and of
// both, evicting the oldest entries until it fits (§4.4).
func (t *dynTable) add(nh, fh uint64, name, value string, size, max uint32) {
	t.evictTo(max - size)
	// The slots the entry takes, chosen while the table holds what the
	// slots may name.
	fi := t.pick(&t.byField, slotOf(fh), name, false)
	ni := t.pick(&t.byName, slotOf(nh), name, true)
	if t.n == uint32(len(t.ents)) {
		t.grow()
	}
	id := t.ins
	t.ents[id&uint32(len(t.ents)-1)] = tableEntry{name, value}
	t.ins++
	t.n++
	t.size += size
	t.byField[fi] = uint8(id)
	t.byName[ni] = uint8(id)
}

// pick returns which of slots i and i^1 a new entry named name takes: one
// that names no entry or, in byName, one naming an entry of that name
// (the new entry is newer), else the one naming the older entry.
func (t *dynTable) pick(slots *[tableSlots]uint8, i uint32, name string, byName bool) uint32 {
	e0, age0, ok0 := t.at(slots[i])
	e1, age1, ok1 := t.at(slots[i^1])
	switch {
	case !ok0 || byName && e0.name == name:
		return i
	case !ok1 || byName && e1.name == name || age1 > age0:
		return i ^ 1
	}
	return i
}

// grow doubles the ring, which is full, keeping each entry at its
// insertion number's place.
func (t *dynTable) grow() {
	n := max(8, 2*len(t.ents))
	ents := make([]tableEntry, n)
	for id := t.ins - t.n; id != t.ins; id++ {
		ents[id&uint32(n-1)] = t.ents[id&uint32(len(t.ents)-1)]
	}
	t.ents = ents
}

// evictTo evicts the oldest entries until the table's size is at most
// size.
func (t *dynTable) evictTo(size uint32) {
	for t.size > size && t.n > 0 {
		e := &t.ents[(t.ins-t.n)&uint32(len(t.ents)-1)]
		t.size -= uint32(len(e.name)) + uint32(len(e.value)) + entryOverhead
		*e = tableEntry{} // its strings let go, for the collector
		t.n--
	}
}

// strHash is a cheap hash of s: its length and its last eight bytes, where
// values that change from one message to the next mostly differ (a date's
// seconds, a length, a path's end), and names differ or differ in length.
func strHash(s string) uint64 {
	n := len(s)
	var w uint64
	if n >= 8 {
		t := s[n-8:]
		w = uint64(t[0]) | uint64(t[1])<<8 | uint64(t[2])<<16 | uint64(t[3])<<24 |
			uint64(t[4])<<32 | uint64(t[5])<<40 | uint64(t[6])<<48 | uint64(t[7])<<56
	} else {
		for i := 0; i < n; i++ {
			w = w<<8 | uint64(s[i])
		}
	}
	return (w + uint64(n)) * 0x9e3779b97f4a7c15
}

// fieldHash is the hash of a field, nh being its name's.
func fieldHash(nh uint64, value string) uint64 {
	return nh ^ bits.RotateLeft64(strHash(value), 29)
}

// slotOf returns the slot of hash h.
func slotOf(h uint64) uint32 { return uint32(h >> (64 - tableSlotBits)) }

// staticTable is the static table of RFC 7541 Appendix A: the entry of
// index i at i (0 is none).
var staticTable = [...]tableEntry{
	{},
	{":authority", ""},
	{":method", "GET"},
	{":method", "POST"},
	{":path", "/"},
	{":path", "/index.html"},
	{":scheme", "http"},
	{":scheme", "https"},
	{":status", "200"},
	{":status", "204"},
	{":status", "206"},
	{":status", "304"},
	{":status", "400"},
	{":status", "404"},
	{":status", "500"},
	{"accept-charset", ""},
	{"accept-encoding", "gzip, deflate"},
	{"accept-language", ""},
	{"accept-ranges", ""},
	{"accept", ""},
	{"access-control-allow-origin", ""},
	{"age", ""},
	{"allow", ""},
	{"authorization", ""},
	{"cache-control", ""},
	{"content-disposition", ""},
	{"content-encoding", ""},
	{"content-language", ""},
	{"content-length", ""},
	{"content-location", ""},
	{"content-range", ""},
	{"content-type", ""},
	{"cookie", ""},
	{"date", ""},
	{"etag", ""},
	{"expect", ""},
	{"expires", ""},
	{"from", ""},
	{"host", ""},
	{"if-match", ""},
	{"if-modified-since", ""},
	{"if-none-match", ""},
	{"if-range", ""},
	{"if-unmodified-since", ""},
	{"last-modified", ""},
	{"link", ""},
	{"location", ""},
	{"max-forwards", ""},
	{"proxy-authenticate", ""},
	{"proxy-authorization", ""},
	{"range", ""},
	{"referer", ""},
	{"refresh", ""},
	{"retry-after", ""},
	{"server", ""},
	{"set-cookie", ""},
	{"strict-transport-security", ""},
	{"transfer-encoding", ""},
	{"user-agent", ""},
	{"vary", ""},
	{"via", ""},
	{"www-authenticate", ""},
}

// staticIndex returns the index of name's first entry in the static
// table, 0 when there is none, and whether an entry holds both name and
// value: then the index is that entry's.
func staticIndex(name, value string) (uint64, bool) {
	i, n := staticName(name)
	for j := i; j < i+n; j++ {
		if staticTable[j].value == value {
			return uint64(j), true
		}
	}
	return uint64(i), false
}

// staticName returns the index of name's first entry in the static table
// and the number of its entries there; 0, 0 when it has none. A switch,
// which compiles to comparisons of lengths and then of a few strings,
// costs less than hashing name for a map.
func staticName(name string) (first, n int) {
	switch name {
	case ":authority":
		return 1, 1
	case ":method":
		return 2, 2
	case ":path":
		return 4, 2
	case ":scheme":
		return 6, 2
	case ":status":
		return 8, 7
	case "accept-charset":
		return 15, 1
	case "accept-encoding":
		return 16, 1
	case "accept-language":
		return 17, 1
	case "accept-ranges":
		return 18, 1
	case "accept":
		return 19, 1
	case "access-control-allow-origin":
		return 20, 1
	case "age":
		return 21, 1
	case "allow":
		return 22, 1
	case "authorization":
		return 23, 1
	case "cache-control":
		return 24, 1
	case "content-disposition":
		return 25, 1
	case "content-encoding":
		return 26, 1
	case "content-language":
		return 27, 1
	case "content-length":
		return 28, 1
	case "content-location":
		return 29, 1
	case "content-range":
		return 30, 1
	case "content-type":
		return 31, 1
	case "cookie":
		return 32, 1
	case "date":
		return 33, 1
	case "etag":
		return 34, 1
	case "expect":
		return 35, 1
	case "expires":
		return 36, 1
	case "from":
		return 37, 1
	case "host":
		return 38, 1
	case "if-match":
		return 39, 1
	case "if-modified-since":
		return 40, 1
	case "if-none-match":
		return 41, 1
	case "if-range":
		return 42, 1
	case "if-unmodified-since":
		return 43, 1
	case "last-modified":
		return 44, 1
	case "link":
		return 45, 1
	case "location":
		return 46, 1
	case "max-forwards":
		return 47, 1
	case "proxy-authenticate":
		return 48, 1
	case "proxy-authorization":
		return 49, 1
	case "range":
		return 50, 1
	case "referer":
		return 51, 1
	case "refresh":
		return 52, 1
	case "retry-after":
		return 53, 1
	case "server":
		return 54, 1
	case "set-cookie":
		return 55, 1
	case "strict-transport-security":
		return 56, 1
	case "transfer-encoding":
		return 57, 1
	case "user-agent":
		return 58, 1
	case "vary":
		return 59, 1
	case "via":
		return 60, 1
	case "www-authenticate":
		return 61, 1
	}
	return 0, 0
}
