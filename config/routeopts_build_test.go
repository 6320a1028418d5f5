package config_test

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestBuildRouteOptions checks that a route's options reach the proxy Build
// makes: the path stripped and the request rules applied upstream, the
// response rules on the upstream's response and on sluice's own 403 and
// 413, the allow list, the body limit.
func TestBuildRouteOptions(t *testing.T) {
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Respond(200, r.Target+" "+r.Get("X-Env")+" "+r.Get("X-Debug"), upstreamtest.Field{Name: "Server", Value: "gunicorn"})
	})
	yaml := `listen: [{address: 127.0.0.1:0}]
access_log: {enabled: false}
upstreams: {app: {servers: [{address: "` + up.Addr() + `"}]}}
routes:
  - path_prefix: /api/
    upstream: app
    strip_prefix: true
    headers:
      request: {set: {X-Env: prod}, remove: [X-Debug]}
      response: {set: {X-Frame-Options: DENY}, remove: [Server]}
    allow: [127.0.0.0/8]
    deny: [127.0.0.2]
    limits: {body: 8B}
  - path_prefix: /internal/
    upstream: app
    headers: {response: {set: {X-Frame-Options: DENY}}}
    allow: [10.0.0.0/8]
`
	addr, _ := serve(t, yaml, nil)
	tests := []struct {
		request string
		status  int
		body    string // a prefix of it
	}{
		{"GET /api/x?q=1 HTTP/1.1\r\nHost: h\r\nX-Debug: 1\r\n\r\n", 200, "/x?q=1 prod "},
		{"POST /api/x HTTP/1.1\r\nHost: h\r\nContent-Length: 8\r\n\r\n12345678", 200, "/x prod "},
		{"POST /api/x HTTP/1.1\r\nHost: h\r\nContent-Length: 9\r\n\r\n123456789", 413, "413"},
		{"GET /internal/x HTTP/1.1\r\nHost: h\r\n\r\n", 403, "403"},
	}
	for _, tt := range tests {
		resp, body := proxytest.Do(t, addr, tt.request)
		if resp.StatusCode != tt.status || !strings.HasPrefix(body, tt.body) {
			t.Errorf("%q: %d %q, want %d %q", tt.request, resp.StatusCode, body, tt.status, tt.body)
		}
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Server") != "" {
			t.Errorf("%q: response header %v, want the route's rules", tt.request, resp.Header)
		}
	}
	if n := len(up.Requests()); n != 2 {
		t.Errorf("the upstream got %d requests, want the 2 allowed within the limit", n)
	}
}
