package route

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/proxy"
)

type named string

func (n named) Pick(*proxy.Session) (*proxy.Peer, error) { return &proxy.Peer{Addr: string(n)}, nil }

func TestMatch(t *testing.T) {
	tbl := New(
		Route{Host: "api.example.com", PathPrefix: "/v1/", Name: "api-v1", Upstream: named("a")},
		Route{Host: "*.Example.com", Name: "wild", Upstream: named("w")},
		Route{PathPrefix: "/static/", Name: "static", Upstream: named("s")},
		Route{Name: "default", Upstream: named("d")},
	)
	tests := []struct{ host, path, want string }{
		{"api.example.com", "/v1/users", "api-v1"},
		{"API.EXAMPLE.COM:8080", "/v1/x", "api-v1"},
		{"api.example.com.", "/v1/x", "api-v1"},
		{"api.example.com", "/v2/x", "wild"},
		{"a.b.example.com", "/", "wild"},
		{"example.com", "/", "default"},
		{"other", "/static/a.css", "static"},
		{"[::1]:80", "/", "default"},
		{"", "/", "default"},
	}
	for _, tt := range tests {
		r := tbl.Match([]byte(tt.host), []byte(tt.path))
		if r == nil || r.Name != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %s", tt.host, tt.path, r, tt.want)
		}
	}
	if New(Route{Host: "x", Upstream: named("x")}).Match([]byte("y"), []byte("/")) != nil {
		t.Error("no route should match")
	}
}

func TestRouteLabel(t *testing.T) {
	for _, tt := range []struct{ host, prefix, want string }{
		{"api.example.com", "/v1/", "api.example.com/v1/"},
		{"*.Example.com", "", "*.example.com"},
		{"", "/static/", "*/static/"},
		{"", "", "*"},
	} {
		tab := New(Route{Host: tt.host, PathPrefix: tt.prefix})
		if got := tab.routes[0].Label(); got != tt.want {
			t.Errorf("Label of host %q, prefix %q = %q, want %q", tt.host, tt.prefix, got, tt.want)
		}
		if got := (&Route{Host: strings.ToLower(tt.host), PathPrefix: tt.prefix}).Label(); got != tt.want {
			t.Errorf("Label of an unbuilt route %q, %q = %q, want %q", tt.host, tt.prefix, got, tt.want)
		}
	}
}
