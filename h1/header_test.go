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
