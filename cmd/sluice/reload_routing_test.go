//go:build unix

package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestReloadRouting checks that a reload applies the routing options and
// reads their files again: a new path rule and rewrite, a changed respond,
// an htpasswd file with a new user, a changed error page; and that it logs
// the warnings of the file it loads.
func TestReloadRouting(t *testing.T) {
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) { c.Respond(200, "up "+r.Target) })
	dir := t.TempDir()
	users, page := filepath.Join(dir, "users"), filepath.Join(dir, "404.html")
	write := func(path, body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(user, password string) string {
		h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		return user + ":" + string(h) + "\n"
	}
	write(users, entry("alice", "a"))
	write(page, "<h1>lost</h1>")
	conf := func(rewrite, body string) string {
		return fmt.Sprintf(`listen: [{address: 127.0.0.1:0}]
access_log: {enabled: false}
errors: {404: %s}
routes:
  - path: /status
    respond: {body: %q}
  - path_prefix: /private/
    upstream: app
    basic_auth: {file: %s}
  - path_regex: ^/v([0-9]+)/(.*)$
    upstream: app
    rewrite: %s
upstreams:
  app:
    servers: [{address: %s}]
`, page, body, users, rewrite, up.Addr())
	}
	basic := func(user, password string) string {
		return "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password)) + "\r\n"
	}
	s := startRunning(t, conf("/$2", "old"))
	addr := s.addr(0)
	check := func(when, path, extra string, status int, body string) {
		t.Helper()
		if code, got := proxytest.Get(t, addr, path, extra); code != status || got != body {
			t.Errorf("%s: GET %s: %d %q, want %d %q", when, path, code, got, status, body)
		}
	}
	check("before", "/status", "", 200, "old")
	check("before", "/v2/x", "", 200, "up /x")
	check("before", "/private/", basic("alice", "a"), 200, "up /private/")
	check("before", "/private/", basic("bob", "b"), 401, "401 Unauthorized\n")
	check("before", "/nowhere", "", 404, "<h1>lost</h1>")

	write(users, entry("alice", "a")+entry("bob", "b"))
	write(page, "<h1>still lost</h1>")
	s.reloadWith(t, conf("/api/$2?v=$1", "new"))
	check("after", "/status", "", 200, "new")
	check("after", "/v2/x", "", 200, "up /api/x?v=2")
	check("after", "/private/", basic("bob", "b"), 200, "up /private/")
	check("after", "/nowhere", "", 404, "<h1>still lost</h1>")

	// A file that no longer loads (an MD5 hash) leaves the running
	// configuration, its users included.
	write(users, "carol:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/\n")
	s.reloadWith(t, conf("/api/$2?v=$1", "new"))
	check("after a broken reload", "/private/", basic("bob", "b"), 200, "up /private/")
	if !strings.Contains(s.log.String(), "Apache MD5") {
		t.Errorf("the broken reload does not say why:\n%s", s.log.String())
	}

	// A route the one before leaves nothing to: loaded, and warned of.
	write(users, entry("alice", "a"))
	s.reloadWith(t, strings.Replace(conf("/$2", "new"), "  - path: /status\n", "  - path_prefix: /\n    respond: {body: all}\n  - path: /status\n", 1))
	check("shadowed", "/status", "", 200, "all")
	if !strings.Contains(s.log.String(), "is never matched: the route at line 5 (path_prefix /) comes first") {
		t.Errorf("no warning logged:\n%s", s.log.String())
	}
}
