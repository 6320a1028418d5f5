package h1

import "testing"

// TestHeaderGrow checks that fields added within what Grow made room for
// allocate nothing.
func TestHeaderGrow(t *testing.T) {
	var h Header
	h.Grow(3, 64)
	allocs := testing.AllocsPerRun(1, func() {
		h.Reset()
		h.Add("Content-Type", "text/css")
		h.Add("ETag", `"1-2"`)
		h.AddBytes([]byte("Vary"), []byte("Accept-Encoding"))
	})
	if allocs != 0 || h.Len() != 3 || string(h.Get("etag")) != `"1-2"` {
		t.Errorf("%v allocations, %d fields, ETag %q", allocs, h.Len(), h.Get("etag"))
	}
}

// TestHeaderLookups checks the look-ups that the names filter (Header.names)
// answers without reading the fields: every name added, parsed, copied or
// set is found whatever its case, names removed and never added are not,
// and a name sharing a removed one's bit is still found.
func TestHeaderLookups(t *testing.T) {
	var parsed Request
	if err := ParseRequest(&parsed, []byte("GET / HTTP/1.1\r\nHost: a\r\nX-Trace: 1\r\nCONNECTION: close\r\n\r\n"), 100); err != nil {
		t.Fatal(err)
	}
	var copied Header
	copied.CopyFrom(&parsed.Header)
	var built Header
	built.Add("Content-Length", "3")
	built.AddBytes([]byte("te"), []byte("trailers"))
	built.Set("Via", "1.1 sluice")
	built.Add("", "empty name")
	built.Del("Content-Length")
	for _, tt := range []struct {
		h    *Header
		name string
		want int
	}{
		{&parsed.Header, "host", 0},
		{&parsed.Header, "x-trace", 1},
		{&parsed.Header, "Connection", 2},
		{&parsed.Header, "Content-Length", -1},
		{&parsed.Header, "", -1},
		{&copied, "X-TRACE", 1},
		{&copied, "Upgrade", -1},
		{&built, "TE", 0},
		{&built, "via", 1},
		{&built, "Content-Length", -1},
		{&built, "Keep-Alive", -1},
	} {
		if got := tt.h.Index(tt.name); got != tt.want {
			t.Errorf("%q in %q: Index %d, want %d", tt.name, tt.h.String(), got, tt.want)
		}
		if got := tt.h.Has(tt.name); got != (tt.want >= 0) {
			t.Errorf("%q in %q: Has %v", tt.name, tt.h.String(), got)
		}
	}
	if n := built.Count(""); n != 1 {
		t.Errorf("Count of the empty name: %d, want 1", n)
	}
	if !parsed.Header.HasToken("connection", "CLOSE") || parsed.Header.HasToken("Upgrade", "websocket") {
		t.Error("HasToken")
	}
	// Two names of one bit: the one kept is found after the other is
	// removed.
	var h Header
	a, b := "Ab", ""
	for c := 'c'; c <= 'z' && b == ""; c++ {
		for d := 'a'; d <= 'z'; d++ {
			if m := string([]rune{c, d}); nameBit(m) == nameBit(a) {
				b = m
				break
			}
		}
	}
	if b == "" {
		t.Fatal("no name of Ab's bit among those tried")
	}
	h.Add(a, "1")
	h.Add(b, "2")
	h.Del(a)
	if h.Has(a) || string(h.Get(b)) != "2" {
		t.Errorf("after removing %q: Has(%q) %v, Get(%q) %q", a, a, h.Has(a), b, h.Get(b))
	}
}
