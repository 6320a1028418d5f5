package config_test

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestBuildRouting checks exact paths, regular expressions and rewrites
// through the proxy Build makes: each request reaches the route the file's
// order gives it, with the path its rewrite makes.
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
  - upstream: web
`
	addr, _ := serve(t, yaml, nil)
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
