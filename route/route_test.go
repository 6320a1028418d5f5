package route

import (
	"regexp"
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
	for _, tt := range []struct{ host, prefix, path, regex, want string }{
		{"api.example.com", "/v1/", "", "", "api.example.com/v1/"},
		{"*.Example.com", "", "", "", "*.example.com"},
		{"", "/static/", "", "", "*/static/"},
		{"", "", "", "", "*"},
		{"", "", "/healthz", "", "*=/healthz"},
		{"a.example", "", "", "^/api/v[0-9]+/", "a.example~^/api/v[0-9]+/"},
	} {
		r := Route{Host: tt.host, PathPrefix: tt.prefix, Path: tt.path}
		if tt.regex != "" {
			r.PathRegex = regexp.MustCompile(tt.regex)
		}
		tab := New(r)
		if got := tab.routes[0].Label(); got != tt.want {
			t.Errorf("Label of %+v = %q, want %q", r, got, tt.want)
		}
		r.Host = strings.ToLower(r.Host)
		if got := r.Label(); got != tt.want {
			t.Errorf("Label of an unbuilt route %+v = %q, want %q", r, got, tt.want)
		}
	}
}

// TestMatchPaths checks exact paths and regular expressions beside
// prefixes, and that the first route in the table's order wins whatever
// its kind of path condition: the exact /api/health before the prefix
// /api/, the regex before the catch-all, and the prefix /old/ before a
// regex that would also match its paths.
func TestMatchPaths(t *testing.T) {
	tbl := New(
		Route{Path: "/api/health", Name: "health"},
		Route{PathPrefix: "/old/", Name: "old"},
		Route{PathPrefix: "/api/", Name: "api"},
		Route{PathRegex: regexp.MustCompile(`^/(old|new)/v[0-9]+/`), Name: "versioned"},
		Route{PathRegex: regexp.MustCompile(`(?i)\.php$`), Name: "php"},
		Route{Host: "exact.example", Path: "/", Name: "root"},
		Route{Name: "default"},
	)
	tests := []struct{ host, path, want string }{
		{"h", "/api/health", "health"},
		{"h", "/api/health/", "api"},
		{"h", "/api/healthz", "api"},
		{"h", "/old/v1/x", "old"},
		{"h", "/new/v12/x", "versioned"},
		{"h", "/new/vx/x", "default"},
		{"h", "/x/new/v1/", "default"}, // anchored by its ^
		{"h", "/index.PHP", "php"},
		{"h", "/index.php.txt", "default"},
		{"exact.example", "/", "root"},
		{"exact.example", "/x", "default"},
		{"other", "/", "default"},
	}
	for _, tt := range tests {
		r := tbl.Match([]byte(tt.host), []byte(tt.path))
		if r == nil || r.Name != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %s", tt.host, tt.path, r, tt.want)
		}
	}
}
