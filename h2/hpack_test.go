package h2

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The encoder's tests: its static table against x/net's decoder's, its
// blocks against RFC 7541's published examples, and round trips through
// x/net's decoder over many blocks with the invariants of §4.2 checked
// after each (the size updates owed) and the two dynamic tables compared.

// TestStaticTable: each entry of staticTable is what a decoder reads for
// its index (RFC 7541 Appendix A), staticIndex finds it by name and value,
// and a name with another value finds the name's first entry.
func TestStaticTable(t *testing.T) {
	dec := hpack.NewDecoder(4096, nil)
	for i := 1; i < len(staticTable); i++ {
		got, err := dec.DecodeFull(appendInt(nil, 7, 0x80, uint64(i)))
		if err != nil || len(got) != 1 {
			t.Fatalf("index %d: %v %v", i, got, err)
		}
		e := staticTable[i]
		if got[0].Name != e.name || got[0].Value != e.value {
			t.Errorf("index %d is %q: %q, want %q: %q", i, e.name, e.value, got[0].Name, got[0].Value)
		}
		if idx, exact := staticIndex(e.name, e.value); idx != uint64(i) || !exact {
			t.Errorf("staticIndex(%q, %q) = %d %v, want %d true", e.name, e.value, idx, exact, i)
		}
		first := i
		for first > 1 && staticTable[first-1].name == e.name {
			first--
		}
		if idx, exact := staticIndex(e.name, "another value"); idx != uint64(first) || exact {
			t.Errorf("staticIndex(%q, another) = %d %v, want %d false", e.name, idx, exact, first)
		}
	}
	if _, err := dec.DecodeFull(appendInt(nil, 7, 0x80, uint64(len(staticTable)))); err == nil {
		t.Errorf("a decoder reads index %d: the static table is longer than staticTable", len(staticTable))
	}
	for _, name := range []string{"", "x-request-id", ":protocol", "content-typ", "content-types", "Content-Type", "dates"} {
		if idx, exact := staticIndex(name, ""); idx != 0 || exact {
			t.Errorf("staticIndex(%q) = %d %v, want none", name, idx, exact)
		}
	}
}

// TestAppendInt: RFC 7541 Appendix C.1's integers.
func TestAppendInt(t *testing.T) {
	for _, tc := range []struct {
		n     uint8
		flags byte
		i     uint64
		want  []byte
	}{
		{5, 0, 10, []byte{0x0a}},               // C.1.1
		{5, 0, 1337, []byte{0x1f, 0x9a, 0x0a}}, // C.1.2
		{8, 0, 42, []byte{0x2a}},               // C.1.3
		{5, 0xe0, 10, []byte{0xea}},            // the flags kept
		{7, 0x80, 126, []byte{0xfe}},           // the largest in the prefix
		{7, 0x80, 127, []byte{0xff, 0x00}},     // the prefix full
		{4, 0x10, 15 + 128, []byte{0x1f, 0x80, 0x01}},
	} {
		if got := appendInt(nil, tc.n, tc.flags, tc.i); !bytes.Equal(got, tc.want) {
			t.Errorf("appendInt(%d, %#x, %d) = % x, want % x", tc.n, tc.flags, tc.i, got, tc.want)
		}
	}
}

func fieldList(kv ...string) []hpack.HeaderField {
	var fs []hpack.HeaderField
	for i := 0; i < len(kv); i += 2 {
		fs = append(fs, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return fs
}

// TestAppendixC: the encoder writes the blocks of RFC 7541 Appendix C.3 to
// C.6 byte for byte, one encoder for each series (its dynamic table
// carries over), leaving the table sizes the RFC gives; a decoder reads
// the RFC's bytes as the same fields.
func TestAppendixC(t *testing.T) {
	req1 := fieldList(":method", "GET", ":scheme", "http", ":path", "/", ":authority", "www.example.com")
	req2 := fieldList(":method", "GET", ":scheme", "http", ":path", "/", ":authority", "www.example.com", "cache-control", "no-cache")
	req3 := fieldList(":method", "GET", ":scheme", "https", ":path", "/index.html", ":authority", "www.example.com", "custom-key", "custom-value")
	resp1 := fieldList(":status", "302", "cache-control", "private", "date", "Mon, 21 Oct 2013 20:13:21 GMT", "location", "https://www.example.com")
	resp2 := fieldList(":status", "307", "cache-control", "private", "date", "Mon, 21 Oct 2013 20:13:21 GMT", "location", "https://www.example.com")
	resp3 := fieldList(":status", "200", "cache-control", "private", "date", "Mon, 21 Oct 2013 20:13:22 GMT", "location", "https://www.example.com",
		"content-encoding", "gzip", "set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")
	type block struct {
		fields []hpack.HeaderField
		hex    string
		size   uint32 // the dynamic table's after it
	}
	for _, tc := range []struct {
		section string
		plain   bool
		table   uint32
		blocks  []block
	}{
		{"C.3", true, 4096, []block{
			{req1, "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", 57},
			{req2, "8286 84be 5808 6e6f 2d63 6163 6865", 110},
			{req3, "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65", 164},
		}},
		{"C.4", false, 4096, []block{
			{req1, "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", 57},
			{req2, "8286 84be 5886 a8eb 1064 9cbf", 110},
			{req3, "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf", 164},
		}},
		{"C.5", true, 256, []block{
			{resp1, "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 " +
				"2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", 222},
			{resp2, "4803 3330 37c1 c0bf", 222},
			{resp3, "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d " +
				"54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 " +
				"5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31", 215},
		}},
		{"C.6", false, 256, []block{
			{resp1, "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 " +
				"2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3", 222},
			{resp2, "4883 640e ffc1 c0bf", 222},
			{resp3, "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab " +
				"77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f " +
				"9587 3160 65c0 03ed 4ee5 b106 3d50 07", 215},
		}},
	} {
		t.Run(tc.section, func(t *testing.T) {
			// The examples' tables have their size from the start:
			// no size update opens the first block.
			h := headerEncoder{plain: tc.plain, cut: uint16(maxTableSize - tc.table)}
			dec := hpack.NewDecoder(tc.table, nil)
			for i, blk := range tc.blocks {
				want, err := hex.DecodeString(strings.ReplaceAll(blk.hex, " ", ""))
				if err != nil {
					t.Fatal(err)
				}
				if got, err := dec.DecodeFull(want); err != nil || !slices.Equal(got, blk.fields) {
					t.Fatalf("%s.%d: the RFC's bytes decode as %v, %v", tc.section, i+1, got, err)
				}
				if got := h.encode(nil, blk.fields); !bytes.Equal(got, want) {
					t.Fatalf("%s.%d:\n got % x\nwant % x", tc.section, i+1, got, want)
				}
				if h.t.size != blk.size {
					t.Fatalf("%s.%d: table size %d, want %d", tc.section, i+1, h.t.size, blk.size)
				}
			}
		})
	}
}

// roundTrip drives an encoder and x/net's decoder as the two ends of a
// connection would: blocks, the decoder's SETTINGS_HEADER_TABLE_SIZE
// changing between them, the encoder released between them; it checks
// that each block decodes as the fields encoded, opens with the size
// updates §4.2 requires, and leaves the two dynamic tables the same.
type roundTrip struct {
	tb      testing.TB
	h       headerEncoder
	dec     *hpack.Decoder
	low     uint32 // the smallest limit set since the last block, MaxUint32: none
	decMax  uint32 // the decoder's table's maximum size, as the blocks set it
	dropped bool   // release dropped a table with entries since the last block
}

func newRoundTrip(tb testing.TB) *roundTrip {
	return &roundTrip{tb: tb, dec: hpack.NewDecoder(4096, nil), low: math.MaxUint32, decMax: 4096}
}

// setLimit is the decoder's end sending SETTINGS_HEADER_TABLE_SIZE v, and
// the encoder's acknowledging it.
func (r *roundTrip) setLimit(v uint32) {
	r.dec.SetAllowedMaxDynamicTableSize(v)
	r.low = min(r.low, v)
	r.h.setLimit(v)
}

func (r *roundTrip) release() {
	r.dropped = r.dropped || r.h.t != nil && r.h.t.n > 0
	r.h.release()
	if r.h.t != nil {
		r.tb.Fatal("a released encoder holds a table")
	}
}

func (r *roundTrip) block(fs []hpack.HeaderField) {
	tb := r.tb
	tb.Helper()
	b := r.h.encode(nil, fs)
	ups, rest := leadingUpdates(b)
	if len(ups) > 2 {
		tb.Fatalf("%d size updates, at most 2 are needed: % x", len(ups), b)
	}
	if r.low < r.decMax && (len(ups) == 0 || ups[0] > uint64(r.low)) {
		tb.Fatalf("table size limit lowered to %d from %d, and the block opens with updates %v", r.low, r.decMax, ups)
	}
	if r.dropped && (len(ups) == 0 || ups[0] != 0) {
		tb.Fatalf("the table was released, and the block opens with updates %v, not 0", ups)
	}
	if len(ups) > 0 {
		r.decMax = uint32(ups[len(ups)-1])
	}
	if len(rest) > 0 && rest[0]&0xe0 == 0x20 {
		tb.Fatalf("a size update after a field: % x", b)
	}
	r.low, r.dropped = math.MaxUint32, false
	got, err := r.dec.DecodeFull(b)
	if err != nil {
		tb.Fatalf("decoding % x: %v", b, err)
	}
	if !slices.Equal(got, fs) {
		tb.Fatalf("decoded %v\nwant %v", got, fs)
	}
	r.checkTables()
}

// checkTables compares the decoder's dynamic table with the encoder's:
// each entry of the encoder's is what the decoder reads at its index, the
// decoder has no entry past them, and the encoder's sizes add up.
func (r *roundTrip) checkTables() {
	tb := r.tb
	tb.Helper()
	t := r.h.t
	var n uint32
	var probe []byte
	var want []hpack.HeaderField
	var size uint32
	if t != nil {
		n = t.n
		for age := uint32(0); age < n; age++ {
			e := t.ents[(t.ins-1-age)&uint32(len(t.ents)-1)]
			probe = appendInt(probe, 7, 0x80, 62+uint64(age))
			want = append(want, hpack.HeaderField{Name: e.name, Value: e.value})
			size += uint32(len(e.name)+len(e.value)) + entryOverhead
		}
		if size != t.size || size > r.h.maxSize() {
			tb.Fatalf("the table's entries make %d bytes, it counts %d, its maximum is %d", size, t.size, r.h.maxSize())
		}
	}
	got, err := r.dec.DecodeFull(probe)
	if err != nil || !slices.Equal(got, want) {
		tb.Fatalf("the decoder's table holds %v (%v), the encoder's %v", got, err, want)
	}
	if _, err := r.dec.DecodeFull(appendInt(nil, 7, 0x80, 62+uint64(n))); err == nil {
		tb.Fatalf("the decoder's table has more than the encoder's %d entries", n)
	}
	r.dec.Close() // the failed block's state
}

// leadingUpdates returns the dynamic table size updates that open block b
// (§6.3) and what follows them.
func leadingUpdates(b []byte) ([]uint64, []byte) {
	var ups []uint64
	for len(b) > 0 && b[0]&0xe0 == 0x20 {
		v := uint64(b[0] & 0x1f)
		b = b[1:]
		if v == 0x1f {
			for shift := 0; len(b) > 0; shift += 7 {
				c := b[0]
				b = b[1:]
				v += uint64(c&0x7f) << shift
				if c&0x80 == 0 {
					break
				}
			}
		}
		ups = append(ups, v)
	}
	return ups, b
}

// response is a proxied response's fields: some the same in every one,
// some different each time (n), a request id never indexed.
func sampleResponse(n int) []hpack.HeaderField {
	fs := fieldList(":status", []string{"200", "404", "302", "503"}[n%4],
		"content-type", "text/html; charset=utf-8",
		"content-length", strconv.Itoa(n*37%5000),
		"date", fmt.Sprintf("Mon, 21 Oct 2013 20:%02d:%02d GMT", n/60%60, n%60),
		"server", "upstream/1.2",
		"etag", fmt.Sprintf(`"%x"`, n*2654435761),
		"cache-control", "max-age="+strconv.Itoa(n%7))
	fs = append(fs, hpack.HeaderField{Name: "x-request-id", Value: fmt.Sprintf("%016x", n), Sensitive: true})
	if n%5 == 0 {
		fs = append(fs, hpack.HeaderField{Name: "set-cookie", Value: "session=" + strconv.Itoa(n), Sensitive: true})
	}
	if n%11 == 0 {
		fs = append(fs, hpack.HeaderField{Name: "x-long", Value: strings.Repeat("l", 200+n)}) // past the 7-bit prefix
	}
	if n%13 == 0 {
		fs = append(fs, hpack.HeaderField{Name: "x-huge", Value: strings.Repeat("h", 5000)}) // never fits the table
	}
	return fs
}

func sampleRequest(n int) []hpack.HeaderField {
	return fieldList(":method", []string{"GET", "POST", "PUT"}[n%3], ":scheme", "https",
		":path", "/items/"+strconv.Itoa(n%17), ":authority", "example.com",
		"user-agent", "client/"+strconv.Itoa(n%3), "accept-encoding", "gzip, deflate",
		"x-forwarded-for", "10.0.0."+strconv.Itoa(n%9), "", "", "x-empty", "")
}

// TestEncoderRoundTrip runs series of blocks through one encoder and one
// decoder, with the table size limit changed and the encoder released
// between them.
func TestEncoderRoundTrip(t *testing.T) {
	type step struct {
		limit   int // >= 0: the decoder's end sets it
		release bool
		blocks  int // then this many blocks
	}
	for _, tc := range []struct {
		name  string
		block func(int) []hpack.HeaderField
		steps []step
	}{
		{"responses", sampleResponse, []step{{-1, false, 300}}},
		{"requests", sampleRequest, []step{{-1, false, 300}}},
		{"small table", sampleResponse, []step{{300, false, 100}, {120, false, 50}, {4096, false, 50}}},
		{"down to 0 and up", sampleResponse, []step{{-1, false, 20}, {0, false, 20}, {4096, false, 20}, {0, false, 0}, {1000, false, 20}}},
		{"down and up between blocks", sampleResponse, []step{{-1, false, 20}, {100, false, 0}, {3000, false, 10}, {50, false, 0}, {0, false, 0}, {4096, false, 5}}},
		{"over the encoder's maximum", sampleRequest, []step{{1 << 20, false, 20}, {8192, false, 20}, {4095, false, 20}}},
		{"released", sampleResponse, []step{{-1, false, 10}, {-1, true, 10}, {-1, true, 0}, {-1, true, 10}}},
		{"released, then lowered", sampleRequest, []step{{-1, false, 10}, {-1, true, 0}, {2000, false, 10}, {-1, true, 0}, {0, false, 3}, {-1, true, 3}}},
		{"released empty", sampleResponse, []step{{0, false, 5}, {-1, true, 5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRoundTrip(t)
			n := 0
			for _, s := range tc.steps {
				if s.limit >= 0 {
					r.setLimit(uint32(s.limit))
				}
				if s.release {
					r.release()
				}
				for range s.blocks {
					r.block(tc.block(n))
					n++
				}
			}
		})
	}
}

// TestEncoderIndexes: what a block repeats comes from the dynamic table,
// one byte a field; a sensitive field never enters it; a field too large
// for the table goes without indexing.
func TestEncoderIndexes(t *testing.T) {
	var h headerEncoder
	fs := fieldList(":status", "200", "content-type", "text/plain", "server", "up", "x-custom", "v")
	h.encode(nil, fs)
	if got := h.encode(nil, fs); len(got) != len(fs) {
		t.Errorf("a repeated block is % x, want a byte a field", got)
	}
	secret := []hpack.HeaderField{{Name: "authorization", Value: "secret", Sensitive: true}}
	for range 2 {
		if b := h.encode(nil, secret); b[0]&0xf0 != 0x10 {
			t.Errorf("a sensitive field as % x, want never indexed", b)
		}
	}
	huge := fieldList("x-huge", strings.Repeat("h", maxTableSize))
	if b := h.encode(nil, huge); b[0]&0xf0 != 0x00 {
		t.Errorf("a field larger than the table as % x, want without indexing", b[:4])
	}
	if h.t.n != 3 {
		t.Errorf("%d entries, want the 3 of the first block", h.t.n)
	}
	// A content-length enters the table when its value comes again, and
	// is indexed from then on; values seen once stay out.
	for i, tc := range []struct {
		value   string
		entries uint32
		indexed bool
	}{
		{"10", 3, false}, {"20", 3, false}, {"30", 3, false}, {"30", 4, false}, {"30", 4, true}, {"40", 4, false},
	} {
		b := h.encode(nil, fieldList("content-length", tc.value))
		if h.t.n != tc.entries || (len(b) == 1) != tc.indexed {
			t.Errorf("content-length %d (%s): % x and %d entries, want %d, indexed: %v", i, tc.value, b, h.t.n, tc.entries, tc.indexed)
		}
	}
}

// FuzzHeaderEncoder runs field lists and table size changes made of the
// input through the round trip: each byte an operation (a field of a few
// names and values, some from the input; a block's end; a new size limit;
// a release).
func FuzzHeaderEncoder(f *testing.F) {
	f.Add([]byte("\x00\x01\x02\x03\x05\x00\x01\x05"))
	f.Add([]byte("\x00\x10\x20\x05\x06\x00\x00\x05\x06\x10\x00\x00\x05\x07\x00\x05"))
	f.Fuzz(func(t *testing.T, data []byte) {
		names := []string{":status", "content-type", "date", "x-a", "x-b", "set-cookie", "", "content-length", ":path"}
		values := []string{"200", "", "text/plain", "a longer value, to be Huffman-coded", strings.Repeat("z", 300)}
		r := newRoundTrip(t)
		var block []hpack.HeaderField
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			c := data[0]
			data = data[1:]
			return c
		}
		for len(data) > 0 {
			op := next()
			switch op & 7 {
			case 0, 1, 2, 3, 4:
				f := hpack.HeaderField{Name: names[int(op>>3)%len(names)], Sensitive: op&0x80 != 0}
				if op&7 == 4 { // a value of the input's
					n := int(next())
					n = min(n, len(data))
					f.Value, data = string(data[:n]), data[n:]
				} else {
					f.Value = values[int(next())%len(values)]
				}
				if op&7 == 3 { // a name of the input's
					f.Name = "x-" + strconv.Itoa(int(next()))
				}
				block = append(block, f)
			case 5:
				r.block(block)
				block = nil
			case 6:
				r.setLimit(uint32(next())<<8 | uint32(next()))
			case 7:
				r.release()
			}
		}
		r.block(block)
	})
}

// TestTableSizeSettings: the client's SETTINGS_HEADER_TABLE_SIZE reaches
// the server's encoder with the SETTINGS acknowledgement; the first
// response after it opens with the size updates: the smallest size the
// frame held, then the last, within the encoder's maximum.
func TestTableSizeSettings(t *testing.T) {
	ts := newTestServer(t, nil, func(st *Stream) {
		st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "x-custom", Value: "same value"}}, nil, true)
	})
	rc := handshake(t, ts.addr())
	rc.fr.ReadMetaHeaders = nil // the blocks as they are
	dec := hpack.NewDecoder(4096, nil)
	id := uint32(1)
	ask := func(want []uint64) {
		t.Helper()
		rc.headers(id, true, getReq...)
		f := rc.until("response HEADERS", func(f http2.Frame) bool {
			_, ok := f.(*http2.HeadersFrame)
			return ok && f.Header().StreamID == id
		}).(*http2.HeadersFrame)
		b := f.HeaderBlockFragment()
		if ups, _ := leadingUpdates(b); !slices.Equal(ups, want) {
			t.Fatalf("response %d opens with size updates %v, want %v", id, ups, want)
		}
		if got, err := dec.DecodeFull(b); err != nil || len(got) != 2 || got[1].Value != "same value" {
			t.Fatalf("response %d: %v %v", id, got, err)
		}
		id += 2
	}
	settings := func(s ...http2.Setting) {
		t.Helper()
		if err := rc.fr.WriteSettings(s...); err != nil {
			t.Fatal(err)
		}
		rc.until("SETTINGS ack", func(f http2.Frame) bool { sf, ok := f.(*http2.SettingsFrame); return ok && sf.IsAck() })
	}
	ask(nil)
	ask(nil)
	dec.SetAllowedMaxDynamicTableSize(2048)
	settings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 2048})
	ask([]uint64{0, 2048})
	ask(nil)
	dec.SetAllowedMaxDynamicTableSize(100)
	settings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 100})
	ask([]uint64{100})
	dec.SetAllowedMaxDynamicTableSize(1 << 16)
	settings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 1 << 16})
	ask([]uint64{maxTableSize})
	settings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 16})
	ask(nil)
}

// BenchmarkHeaderEncoder encodes response blocks as a proxy's connection
// does: the same fields each time, or a content-length that changes.
//
//	go test -run '^$' -bench HeaderEncoder ./h2/
func BenchmarkHeaderEncoder(b *testing.B) {
	for _, tc := range []struct {
		name   string
		length func(int) string
	}{
		{"same", func(int) string { return "64" }},
		{"length varies", func(i int) string { return strconv.Itoa(1000 + i*7919%50000) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var h headerEncoder
			var buf []byte
			fs := fieldList(":status", "200", "content-type", "text/plain", "content-length", "",
				"date", "Mon, 21 Oct 2013 20:13:21 GMT", "server", "upstream/1.2")
			fs = append(fs, hpack.HeaderField{Name: "x-request-id", Value: "0123456789abcdef", Sensitive: true})
			lengths := make([]string, 1024)
			for i := range lengths {
				lengths[i] = tc.length(i)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				fs[2].Value = lengths[i%len(lengths)]
				buf = h.encode(buf[:0], fs)
			}
		})
	}
}

// TestEncoderNghttp: nghttp2's client, whose HPACK decoder checks what
// x/net's does not (a size update owed after a smaller
// SETTINGS_HEADER_TABLE_SIZE), reads 300 responses on one connection, for
// each of a few table sizes it asks for, their fields from the dynamic
// table, new ones, and some too large for it.
func TestEncoderNghttp(t *testing.T) {
	bin, err := exec.LookPath("nghttp")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("nghttp not installed (Debian package nghttp2-client)")
		}
		t.Skip("nghttp not installed (Debian package nghttp2-client)")
	}
	var n atomic.Int64
	// nghttp opens as many of its 300 streams at once as the server
	// allows: with the default 250, a stream opened while 250 handlers
	// still finish (their responses sent) is refused, as Settings says,
	// and nghttp does not resend it. The encoder is what is tested here.
	ts := newTestServer(t, &Settings{MaxConcurrentStreams: 1000}, func(st *Stream) {
		i := int(n.Add(1))
		body := strings.Repeat("b", i%300)
		st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "text/plain"},
			{Name: "content-length", Value: strconv.Itoa(len(body))}, {Name: "etag", Value: strconv.Itoa(i % 5)},
			{Name: "x-request-id", Value: strconv.Itoa(i), Sensitive: true}, {Name: "x-big", Value: strings.Repeat("z", i*37%2000)},
			{Name: "server", Value: "s"}}, []byte(body), true)
	})
	for _, size := range []string{"4096", "0", "100", "1000"} {
		args := []string{"-n", "-c", size}
		for i := range 300 {
			args = append(args, "http://"+ts.addr()+"/"+strconv.Itoa(i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), failsafe)
		before := n.Load()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		cancel()
		if err != nil || len(out) > 0 {
			t.Fatalf("nghttp, header table size %s: %v\n%s", size, err, out)
		}
		if got := n.Load() - before; got != 300 {
			t.Fatalf("%d responses, want 300", got)
		}
	}
}
