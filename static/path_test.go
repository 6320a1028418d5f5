package static

import (
	"path"
	"path/filepath"
	"strings"
	"testing"
)

func TestFileName(t *testing.T) {
	tests := []struct {
		in     string
		name   string
		dir    bool
		status int
	}{
		{"", "", true, 0},
		{"/", "", true, 0},
		{"a.css", "a.css", false, 0},
		{"css/a.css", "css/a.css", false, 0},
		{"/css//a.css", "css/a.css", false, 0},
		{"./css/./a.css", "css/a.css", false, 0},
		{"docs/", "docs", true, 0},
		{"a%20b", "a b", false, 0},
		{"a%25b", "a%b", false, 0},
		{"%e2%82%ac", "\u20ac", false, 0},
		{"%252e%252e", "%2e%2e", false, 0}, // decoded once
		{".well-known/x", ".well-known/x", false, 0},
		{"a..b", "a..b", false, 0},
		{"...", "", false, 404}, // hidden
		{"..", "", false, 400},
		{"../x", "", false, 400},
		{"a/../x", "", false, 400},
		{"%2e%2e/x", "", false, 400},
		{"%2E.", "", false, 400},
		{"a/..", "", false, 400},
		{"a%2f..%2fx", "", false, 404},
		{"a%2Fb", "", false, 404},
		{"..\\x", "", false, 404},
		{"a%5cb", "", false, 404},
		{"a%00", "", false, 400},
		{"a%0d%0a", "", false, 400},
		{"a%7f", "", false, 400},
		{"a%", "", false, 400},
		{"a%4", "", false, 400},
		{"a%g0", "", false, 400},
		{".env", "", false, 404},
		{"a/.git/config", "", false, 404},
		{"%2egit", "", false, 404},
		{strings.Repeat("a", 255), strings.Repeat("a", 255), false, 0},
		{strings.Repeat("a", 256), "", false, 404},
		{strings.Repeat("a/", 2100), "", false, 404},
	}
	for _, tt := range tests {
		name, dir, status := fileName([]byte(tt.in), false)
		if name != tt.name || status != tt.status || (status == 0 && dir != tt.dir) {
			t.Errorf("fileName(%q) = %q, %v, %d; want %q, %v, %d", tt.in, name, dir, status, tt.name, tt.dir, tt.status)
		}
	}
	if name, _, status := fileName([]byte("a/.env"), true); name != "a/.env" || status != 0 {
		t.Errorf("with hidden names served: %q, %d", name, status)
	}
}

// FuzzFileName checks that no request path maps to a name that leaves the
// root, whatever it holds: a name fileName returns is local (no "..",
// not absolute, no empty or "." element), has no NUL, control byte or
// backslash, and joined to a root stays under it.
func FuzzFileName(f *testing.F) {
	for _, s := range []string{"", "a/b", "../x", "%2e%2e/x", "..%2f", "..\\x", "a%00", "./a", "//a", ".env", "%"} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, p []byte, hidden bool) {
		name, _, status := fileName(p, hidden)
		switch status {
		case 0:
		case 400, 404:
			if name != "" {
				t.Fatalf("refused with %d and name %q", status, name)
			}
			return
		default:
			t.Fatalf("status %d", status)
		}
		if name == "" {
			return
		}
		if !filepath.IsLocal(name) || path.Clean(name) != name || strings.HasPrefix(name, "/") {
			t.Fatalf("%q: name %q is not local and clean", p, name)
		}
		for _, e := range strings.Split(name, "/") {
			if e == "" || e == "." || e == ".." || len(e) > maxElement {
				t.Fatalf("%q: name %q has element %q", p, name, e)
			}
			if e[0] == '.' && !hidden && e != ".well-known" {
				t.Fatalf("%q: hidden element %q", p, e)
			}
		}
		if strings.ContainsAny(name, "\\\x00") || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Fatalf("%q: name %q holds a backslash or control byte", p, name)
		}
		const root = "/srv/root"
		if j := filepath.Join(root, name); !strings.HasPrefix(j, root+"/") {
			t.Fatalf("%q: %q joined to the root is %q", p, name, j)
		}
	})
}

func TestByteRange(t *testing.T) {
	tests := []struct {
		v      string
		size   int64
		off, n int64
		s      span
	}{
		{"bytes=0-0", 10, 0, 1, part},
		{"bytes=0-9", 10, 0, 10, part},
		{"bytes=2-", 10, 2, 8, part},
		{"bytes=2-100", 10, 2, 8, part},
		{"BYTES=2-3", 10, 2, 2, part},
		{"bytes= 2-3 ", 10, 2, 2, part},
		{"bytes=-3", 10, 7, 3, part},
		{"bytes=-30", 10, 0, 10, part},
		{"bytes=10-", 10, 0, 0, unsatisfiable},
		{"bytes=-0", 10, 0, 0, unsatisfiable},
		{"bytes=3-2", 10, 0, 0, unsatisfiable},
		{"bytes=0-", 0, 0, 0, unsatisfiable},
		{"bytes=-1", 0, 0, 0, unsatisfiable},
		{"bytes=99999999999999999999999-", 10, 0, 0, unsatisfiable},
		{"bytes=0-99999999999999999999999", 10, 0, 10, part},
		{"bytes=0-1,3-4", 10, 0, 0, whole},
		{"bytes=0-1, 3-4", 10, 0, 0, whole},
		{"bytes=", 10, 0, 0, whole},
		{"bytes=-", 10, 0, 0, whole},
		{"bytes=a-1", 10, 0, 0, whole},
		{"bytes=1-a", 10, 0, 0, whole},
		{"bytes=+1-2", 10, 0, 0, whole},
		{"bytes 1-2", 10, 0, 0, whole},
		{"items=1-2", 10, 0, 0, whole},
		{"", 10, 0, 0, whole},
	}
	for _, tt := range tests {
		off, n, s := byteRange([]byte(tt.v), tt.size)
		if off != tt.off || n != tt.n || s != tt.s {
			t.Errorf("byteRange(%q, %d) = %d, %d, %d; want %d, %d, %d", tt.v, tt.size, off, n, s, tt.off, tt.n, tt.s)
		}
	}
}

// FuzzByteRange checks that a part is always within the representation.
func FuzzByteRange(f *testing.F) {
	f.Add([]byte("bytes=0-1"), int64(10))
	f.Add([]byte("bytes=-5"), int64(3))
	f.Fuzz(func(t *testing.T, v []byte, size int64) {
		if size < 0 {
			return
		}
		off, n, s := byteRange(v, size)
		if s == part && (off < 0 || n <= 0 || off+n > size) {
			t.Fatalf("byteRange(%q, %d) = [%d, +%d)", v, size, off, n)
		}
	})
}
