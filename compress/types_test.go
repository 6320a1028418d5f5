package compress

import "testing"

func TestTypes(t *testing.T) {
	ts, err := ParseTypes([]string{"text/*", "application/json", "Image/SVG+XML"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ct   string
		want bool
	}{
		{"text/html", true},
		{"text/html; charset=utf-8", true},
		{"TEXT/CSS", true},
		{"application/json", true},
		{"application/json;charset=utf-8", true},
		{" application/json ", true},
		{"image/svg+xml", true},
		{"application/jsonx", false},
		{"application/javascript", false},
		{"image/png", false},
		{"text", false},
		{"text/", false},
		{"", false},
		{"textual/plain", false},
	}
	for _, tt := range tests {
		if got := ts.Match([]byte(tt.ct)); got != tt.want {
			t.Errorf("Match(%q) = %v, want %v", tt.ct, got, tt.want)
		}
	}
	any, _ := ParseTypes([]string{"*/*"})
	if !any.Match([]byte("video/mp4")) || any.Match([]byte("nonsense")) {
		t.Error("*/* matches every media type and nothing else")
	}
	for _, bad := range []string{"text", "*/html", "text/ html", "te xt/*", "/json", "text/", "", "a/b/c"} {
		if _, err := ParseTypes([]string{bad}); err == nil {
			t.Errorf("ParseTypes(%q): no error", bad)
		}
	}
}
