package route

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/idempotency"
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

// TestIdempotency checks that the table hands the engine the layer of the
// session's route: the one RequestFilter matched (kept in Ctx), or one
// matched from the request when Ctx is not the table's.
func TestIdempotency(t *testing.T) {
	layer, err := idempotency.New(idempotency.Options{Name: "*/api/"})
	if err != nil {
		t.Fatal(err)
	}
	tbl := New(
		Route{PathPrefix: "/api/", Name: "api", Upstream: named("a"), Idempotency: layer},
		Route{Name: "default", Upstream: named("d")},
	)
	session := func(target string) *proxy.Session {
		s := new(proxy.Session)
		if err := h1.ParseRequest(&s.Request, []byte("POST "+target+" HTTP/1.1\r\nHost: h\r\n\r\n"), 10); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tt := range []struct {
		target string
		want   *idempotency.Layer
	}{{"/api/orders", layer}, {"/other", nil}} {
		s := session(tt.target)
		if got := tbl.Idempotency(s); got != tt.want {
			t.Errorf("%s, before RequestFilter: layer %p, want %p", tt.target, got, tt.want)
		}
		tbl.RequestFilter(s)
		if got := tbl.Idempotency(s); got != tt.want {
			t.Errorf("%s, after RequestFilter: layer %p, want %p", tt.target, got, tt.want)
		}
	}
	// A phase that rewrites the path does not change the route's layer.
	s := session("/api/orders")
	tbl.RequestFilter(s)
	s.Request.SetTarget("/other")
	if tbl.Idempotency(s) != layer {
		t.Error("the layer changed with the path")
	}
}
