package config

import (
	"errors"
	"strings"
	"testing"
)

// routesFile is a file with one upstream, web, and the routes given.
func routesFile(routes string) string {
	return "listen: [{address: \"127.0.0.1:8080\"}]\nupstreams: {web: {servers: [{address: \"127.0.0.1:9001\"}]}}\nroutes:\n" + routes
}

func TestRoutePaths(t *testing.T) {
	c, err := Parse("t.yaml", []byte(routesFile(`  - {path: /healthz, upstream: web}
  - {path_regex: '^/api/v(?P<version>[0-9]+)/', upstream: web}
  - {path_prefix: /, upstream: web}
`)))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Routes[0]; r.Path != "/healthz" || r.PathPrefix != "" || r.PathRegex != "" {
		t.Errorf("route 0: %+v", r)
	}
	if r := c.Routes[1]; r.PathRegex != `^/api/v(?P<version>[0-9]+)/` || r.pathRegex == nil || !r.pathRegex.MatchString("/api/v2/x") {
		t.Errorf("route 1: %+v", r)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	if got := routeName(c.Routes[1]); got != `*~^/api/v(?P<version>[0-9]+)/` {
		t.Errorf("routeName = %q", got)
	}
}

func TestRoutePathProblems(t *testing.T) {
	tests := []struct {
		name, routes string
		line, col    int
		path, msg    string
	}{
		{"two conditions", "  - {path_prefix: /a/, path_regex: ^/a, upstream: web}\n", 4, 5, "routes[0].path_regex", "one of path_prefix, path or path_regex; this one gives path_prefix and path_regex"},
		{"bad regex", "  - {path_regex: '^/(a', upstream: web}\n", 4, 18, "routes[0].path_regex", "not a valid regular expression (Go's RE2 syntax): error parsing regexp: missing closing )"},
		{"backreference", "  - {path_regex: '(a)\\1', upstream: web}\n", 4, 18, "routes[0].path_regex", "invalid escape sequence"},
		{"empty regex", "  - {path_regex: '', upstream: web}\n", 4, 18, "routes[0].path_regex", "must not be empty"},
		{"relative path", "  - {path: healthz, upstream: web}\n", 4, 12, "routes[0].path", `must start with "/"`},
		{"path with query", "  - {path: '/a?b', upstream: web}\n", 4, 12, "routes[0].path", "must not contain '?': a path is matched against the path without its query"},
		{"strip with path", "  - {path: /a, strip_prefix: true, upstream: web}\n", 4, 30, "routes[0].strip_prefix", "needs a path_prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(routesFile(tt.routes)))
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) != 1 {
				t.Fatalf("got %v, want one problem", err)
			}
			p := e.Problems[0]
			if p.Line != tt.line || p.Column != tt.col || p.Path != tt.path || !strings.Contains(p.Msg, tt.msg) {
				t.Errorf("got %d:%d %s: %s\nwant %d:%d %s: ...%s...", p.Line, p.Column, p.Path, p.Msg, tt.line, tt.col, tt.path, tt.msg)
			}
		})
	}
}

// TestShadowedRoutes checks the warning for a route an earlier one leaves
// nothing to, and that routes that only look alike get none.
func TestShadowedRoutes(t *testing.T) {
	tests := []struct {
		name, first, second string
		shadowed            bool
	}{
		{"catch-all first", "{upstream: web}", "{path_prefix: /api/, upstream: web}", true},
		{"shorter prefix first", "{path_prefix: /api/, upstream: web}", "{path_prefix: /api/v1/, upstream: web}", true},
		{"longer prefix first", "{path_prefix: /api/v1/, upstream: web}", "{path_prefix: /api/, upstream: web}", false},
		{"same prefix", "{path_prefix: /a/, upstream: web}", "{path_prefix: /a/, upstream: web}", true},
		{"prefix over exact", "{path_prefix: /api/, upstream: web}", "{path: /api/health, upstream: web}", true},
		{"exact over prefix", "{path: /api/health, upstream: web}", "{path_prefix: /api/, upstream: web}", false},
		{"same exact", "{path: /x, upstream: web}", "{path: /x, upstream: web}", true},
		{"regex over exact it matches", "{path_regex: '^/api/', upstream: web}", "{path: /api/health, upstream: web}", true},
		{"regex over exact it misses", "{path_regex: '^/api/$', upstream: web}", "{path: /api/health, upstream: web}", false},
		{"same regex", "{path_regex: 'x$', upstream: web}", "{path_regex: 'x$', upstream: web}", true},
		{"prefix and regex", "{path_prefix: /api/, upstream: web}", "{path_regex: '^/api/', upstream: web}", false},
		{"any host first", "{path_prefix: /a/, upstream: web}", "{host: a.example, path_prefix: /a/b/, upstream: web}", true},
		{"other host", "{host: b.example, upstream: web}", "{host: a.example, upstream: web}", false},
		{"wildcard host", "{host: '*.example.com', upstream: web}", "{host: a.example.com, path: /, upstream: web}", true},
		{"wildcard over narrower wildcard", "{host: '*.example.com', upstream: web}", "{host: '*.a.example.com', upstream: web}", true},
		{"wildcard and its domain", "{host: '*.example.com', upstream: web}", "{host: example.com, upstream: web}", false},
		{"host first, any host later", "{host: a.example, upstream: web}", "{upstream: web}", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("t.yaml", []byte(routesFile("  - "+tt.first+"\n  - "+tt.second+"\n")))
			if err != nil {
				t.Fatal(err)
			}
			w := c.Warnings()
			if got := len(w) == 1; got != tt.shadowed || len(w) > 1 {
				t.Fatalf("warnings %v, want shadowed %v", w, tt.shadowed)
			}
			if tt.shadowed && (w[0].Line != 5 || w[0].Path != "routes[1]" || !strings.Contains(w[0].Msg, "is never matched: the route at line 4")) {
				t.Errorf("warning %v", w[0])
			}
		})
	}
}

func TestRouteRewrite(t *testing.T) {
	c, err := Parse("t.yaml", []byte(routesFile(`  - {path_regex: '^/api/v([0-9]+)/(.*)$', rewrite: '/$2?v=$1', upstream: web}
  - path_prefix: /old/
    rewrite: {regex: '^/old/(?P<rest>.*)', replacement: /new/$rest}
    upstream: web
`)))
	if err != nil {
		t.Fatal(err)
	}
	if rw := c.Routes[0].Rewrite; rw == nil || rw.Regex != "" || rw.Replacement != "/$2?v=$1" || rw.re != c.Routes[0].pathRegex {
		t.Errorf("route 0 rewrite: %+v", rw)
	}
	if rw := c.Routes[1].Rewrite; rw == nil || rw.Regex != "^/old/(?P<rest>.*)" || rw.Replacement != "/new/$rest" || rw.re == nil || rw.Line != 6 {
		t.Errorf("route 1 rewrite: %+v", rw)
	}
	for i := range c.Routes {
		phases, err := routePhases(&c.Routes[i])
		if err != nil || len(phases) != 1 {
			t.Errorf("route %d: phases %v, %v", i, phases, err)
		}
	}
}

func TestRouteRewriteProblems(t *testing.T) {
	tests := []struct {
		name, routes string
		line, col    int
		path, msg    string
	}{
		{"no captures to take", "  - {path_prefix: /a/, rewrite: /b/$1, upstream: web}\n", 4, 33, "routes[0].rewrite",
			"the replacement alone takes its captures from the route's path_regex, and this route has none; write {regex: ..., replacement: /b/$1}"},
		{"no regex", "  - {path_prefix: /a/, rewrite: {replacement: /b}, upstream: web}\n", 4, 33, "routes[0].rewrite.regex", "missing; it is required unless the route has a path_regex"},
		{"no replacement", "  - {path_prefix: /a/, rewrite: {regex: ^/a}, upstream: web}\n", 4, 33, "routes[0].rewrite.replacement", "missing; it is required"},
		{"bad regex", "  - {rewrite: {regex: '(', replacement: /x}, upstream: web}\n", 4, 23, "routes[0].rewrite.regex", "missing closing )"},
		{"relative", "  - {path_regex: ^/(a), rewrite: $1, upstream: web}\n", 4, 34, "routes[0].rewrite", `the replacement "$1" must start with "/"`},
		{"capture beyond", "  - {rewrite: {regex: ^/(a), replacement: /$2}, upstream: web}\n", 4, 43, "routes[0].rewrite", "at 1: $2 refers to capture 2"},
		{"unknown variable", "  - {path_regex: ^/(a), rewrite: /$hots, upstream: web}\n", 4, 34, "routes[0].rewrite", "$hots is neither a capture"},
		{"with strip_prefix", "  - {path_prefix: /a/, strip_prefix: true, rewrite: {regex: ^/a, replacement: /b}, upstream: web}\n", 4, 53, "routes[0].rewrite", "and strip_prefix both change the path"},
		{"with static", "  - {path_prefix: /a/, rewrite: {regex: ^/a, replacement: /b}, static: {root: .}}\n", 4, 33, "routes[0].rewrite", "a static route sends none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(routesFile(tt.routes)))
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) != 1 {
				t.Fatalf("got %v, want one problem", err)
			}
			p := e.Problems[0]
			if p.Line != tt.line || p.Column != tt.col || p.Path != tt.path || !strings.Contains(p.Msg, tt.msg) {
				t.Errorf("got %d:%d %s: %s\nwant %d:%d %s: ...%s...", p.Line, p.Column, p.Path, p.Msg, tt.line, tt.col, tt.path, tt.msg)
			}
		})
	}
}
