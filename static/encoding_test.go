package static

import (
	"testing"

	"github.com/sluice-proxy/sluice/h1"
)

func TestAccepted(t *testing.T) {
	tests := []struct {
		fields   []string
		br, gzip int
	}{
		{nil, 0, 0},
		{[]string{"gzip"}, 0, 1000},
		{[]string{"gzip, deflate, br"}, 1000, 1000},
		{[]string{"br;q=0.5, gzip;q=0.8"}, 500, 800},
		{[]string{"br; q=0.5"}, 500, 0},
		{[]string{"BR;Q=1.0"}, 1000, 0},
		{[]string{"*"}, 1000, 1000},
		{[]string{"*;q=0.1, br;q=0"}, 0, 100},
		{[]string{"x-gzip"}, 0, 1000},
		{[]string{"gzip;q=2"}, 0, 0},
		{[]string{"gzip;q=0.1234"}, 0, 0},
		{[]string{"identity"}, 0, 0},
		{[]string{"br", "gzip;q=0.3"}, 1000, 300},
		{[]string{""}, 0, 0},
		{[]string{",,;q=1,"}, 0, 0},
	}
	for _, tt := range tests {
		var h h1.Header
		for _, v := range tt.fields {
			h.Add("Accept-Encoding", v)
		}
		if q := accepted(&h); q[0] != tt.br || q[1] != tt.gzip {
			t.Errorf("accepted(%q) = br %d, gzip %d; want %d, %d", tt.fields, q[0], q[1], tt.br, tt.gzip)
		}
	}
}

func TestContentType(t *testing.T) {
	for name, want := range map[string]string{
		"a.HTML": "text/html; charset=utf-8", "a.css": "text/css; charset=utf-8", "a.js": "text/javascript; charset=utf-8",
		"a.woff2": "font/woff2", "a.svg": "image/svg+xml", "a.wasm": "application/wasm", "noext": "application/octet-stream",
	} {
		if got := ContentType(name); got != want {
			t.Errorf("ContentType(%q) = %q, want %q", name, got, want)
		}
	}
}
