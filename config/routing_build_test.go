package config_test

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestBuildRouting checks exact paths, regular expressions, rewrites and
// respond through the proxy Build makes: each request reaches the route
// the file's order gives it, with the path its rewrite makes, or gets the
// route's own answer, the route's header rules on it.
func TestBuildRouting(t *testing.T) {
	echo := func(name string) *upstreamtest.Server {
		return upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) { c.Respond(200, name+" "+r.Target) })
	}
	health, api, web := echo("health"), echo("api"), echo("web")
	yaml := `listen: [{address: 127.0.0.1:0}]
access_log: {enabled: false}
upstreams:
  health: {servers: [{address: "` + health.Addr() + `"}]}
  api: {servers: [{address: "` + api.Addr() + `"}]}
  web: {servers: [{address: "` + web.Addr() + `"}]}
routes:
  - path: /api/health
    upstream: health
  - path_regex: ^/api/v(?P<version>[0-9]+)/(.*)$
    upstream: api
    rewrite: /$2?version=$version
  - path_prefix: /old/
    upstream: web
    rewrite: {regex: ^/old/(.*)$, replacement: /new/$1}
  - path_regex: ^/shop/(.*)$
    respond: {status: 301, location: "https://$host/store/$1$is_args$args"}
  - path: /down
    respond: {status: 503, body: "back soon\n", headers: {Retry-After: "60"}}
    headers: {response: {set: {X-Frame-Options: DENY}}}
  - upstream: web
`
	addr, _ := serve(t, yaml, nil)
	resp, body := proxytest.Do(t, addr, "GET /shop/a?b=c HTTP/1.1\r\nHost: Example.com:8080\r\n\r\n")
	if resp.StatusCode != 301 || resp.Header.Get("Location") != "https://example.com/store/a?b=c" || body != "" {
		t.Errorf("redirect: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	resp, body = proxytest.Do(t, addr, "GET /down HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp.StatusCode != 503 || body != "back soon\n" || resp.Header.Get("Retry-After") != "60" ||
		resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("maintenance: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	tests := []struct{ path, want string }{
		{"/api/health", "health /api/health"},
		{"/api/health?full=1", "health /api/health?full=1"},
		{"/api/health/", "web /api/health/"},
		{"/api/v3/users?page=2", "api /users?version=3"},
		{"/api/vx/users", "web /api/vx/users"},
		{"/old/a/b?c=d", "web /new/a/b?c=d"},
		{"/other", "web /other"},
	}
	for _, tt := range tests {
		status, body := proxytest.Get(t, addr, tt.path, "")
		if status != 200 || strings.TrimSpace(body) != tt.want {
			t.Errorf("GET %s: %d %q, want %q", tt.path, status, body, tt.want)
		}
	}
}
