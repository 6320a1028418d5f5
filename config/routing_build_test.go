package config_test

import (
	"encoding/base64"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

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

// TestBuildErrorPages checks errors through the proxy Build makes: the
// top-level pages on sluice's own 502 and on the 404 of a request no route
// matches, a route's page over the top-level one, a page on a rate limit's
// 429, and an upstream's own 502 as it came.
func TestBuildErrorPages(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p502, p404, route502, p429 := write("502.html", "<h1>502</h1>"), write("404.html", "<h1>404</h1>"), write("r502.txt", "route 502"), write("429.html", "<h1>429</h1>")
	bad := upstreamtest.Start(t, upstreamtest.Status(502, "the upstream's own"))
	yaml := `listen: [{address: 127.0.0.1:0}]
access_log: {enabled: false}
errors: {502: ` + p502 + `, 404: ` + p404 + `}
upstreams:
  dead: {servers: [{address: "` + upstreamtest.Dead(t) + `"}], retry: {tries: 1}}
  bad: {servers: [{address: "` + bad.Addr() + `"}]}
routes:
  - {path: /dead, upstream: dead}
  - {path: /dead-route, upstream: dead, errors: {502: ` + route502 + `}}
  - {path: /bad, upstream: bad}
  - {path: /limited, upstream: bad, rate_limit: {rate: 1/h, burst: 1}, errors: {429: ` + p429 + `}}
`
	addr, _ := serve(t, yaml, nil)
	tests := []struct {
		path        string
		status      int
		body, ctype string
		proxied     bool // Proxy-Status expected
	}{
		{"/dead", 502, "<h1>502</h1>", "text/html; charset=utf-8", true},
		{"/dead-route", 502, "route 502", "text/plain; charset=utf-8", true},
		{"/nowhere", 404, "<h1>404</h1>", "text/html; charset=utf-8", true},
		{"/bad", 502, "the upstream's own", "", false},
		{"/limited", 502, "the upstream's own", "", false},
		{"/limited", 429, "<h1>429</h1>", "text/html; charset=utf-8", true},
	}
	for _, tt := range tests {
		resp, body := proxytest.Do(t, addr, "GET "+tt.path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		if resp.StatusCode != tt.status || body != tt.body || resp.Header.Get("Content-Type") != tt.ctype || (resp.Header.Get("Proxy-Status") != "") != tt.proxied {
			t.Errorf("GET %s: %d %q %v, want %d %q %s", tt.path, resp.StatusCode, body, resp.Header, tt.status, tt.body, tt.ctype)
		}
	}
}

// TestBuildBasicAuth checks basic_auth through the proxy Build makes: a
// 401 with its challenge (and the route's page for it) without a user's
// credentials, the upstream reached with them, without Authorization.
func TestBuildBasicAuth(t *testing.T) {
	dir := t.TempDir()
	h, err := bcrypt.GenerateFromPassword([]byte("wonderland"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(dir, "users")
	page := filepath.Join(dir, "401.html")
	if err := os.WriteFile(users, []byte("alice:"+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, []byte("<h1>who are you?</h1>"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) { c.Respond(200, "in "+r.Get("Authorization")) })
	yaml := `listen: [{address: 127.0.0.1:0}]
access_log: {enabled: false}
upstreams: {app: {servers: [{address: "` + up.Addr() + `"}]}}
routes:
  - upstream: app
    basic_auth: {file: ` + users + `, realm: Staff}
    errors: {401: ` + page + `}
`
	addr, _ := serve(t, yaml, nil)
	resp, body := proxytest.Do(t, addr, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp.StatusCode != 401 || body != "<h1>who are you?</h1>" || resp.Header.Get("WWW-Authenticate") != `Basic realm="Staff", charset="UTF-8"` {
		t.Errorf("without credentials: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = proxytest.Do(t, addr, "GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Basic "+base64.StdEncoding.EncodeToString([]byte("alice:wonderland"))+"\r\n\r\n")
	if resp.StatusCode != 200 || body != "in " {
		t.Errorf("with alice's: %d %q", resp.StatusCode, body)
	}
}

// TestBuildForwardAuth checks forward_auth through the proxy Build makes,
// against an authentication service on a local port: a token it knows
// lets the request through with the user it names, any other request
// gets its 401 as it came, and with the service gone nothing gets
// through.
func TestBuildForwardAuth(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer good" && r.Header.Get("X-Forwarded-Uri") == "/app/x?y=1" {
			w.Header().Set("X-Auth-User", "alice")
			return
		}
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "who are you?", http.StatusUnauthorized)
	})}
	go svc.Serve(ln)
	t.Cleanup(func() { svc.Close() })
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) { c.Respond(200, "user "+r.Get("X-Auth-User")) })
	yaml := `listen: [{address: 127.0.0.1:0}]
access_log: {enabled: false}
upstreams: {app: {servers: [{address: "` + up.Addr() + `"}]}}
routes:
  - upstream: app
    forward_auth: {address: "` + ln.Addr().String() + `", path: /verify, response_headers: [X-Auth-User]}
`
	addr, _ := serve(t, yaml, nil)
	resp, body := proxytest.Do(t, addr, "GET /app/x?y=1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer good\r\nX-Auth-User: mallory\r\n\r\n")
	if resp.StatusCode != 200 || body != "user alice" {
		t.Errorf("a good token: %d %q", resp.StatusCode, body)
	}
	resp, body = proxytest.Do(t, addr, "GET /app/x?y=1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer bad\r\n\r\n")
	if resp.StatusCode != 401 || body != "who are you?\n" || resp.Header.Get("WWW-Authenticate") != "Bearer" {
		t.Errorf("a bad token: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	svc.Close()
	resp, _ = proxytest.Do(t, addr, "GET /app/x?y=1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer good\r\n\r\n")
	if resp.StatusCode != 502 || !strings.HasPrefix(resp.Header.Get("Proxy-Status"), "sluice; error=") {
		t.Errorf("the service gone: %d %v", resp.StatusCode, resp.Header)
	}
	if n := len(up.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests, want 1", n)
	}
}
