package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-proxy/sluice/auth"
)

// htpasswd writes an htpasswd file of user:password pairs (bcrypt, cost 4)
// in dir.
func htpasswd(t *testing.T, dir string, pairs ...string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(pairs[i+1]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(pairs[i] + ":" + string(h) + "\n")
	}
	p := filepath.Join(dir, "users")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRouteBasicAuth(t *testing.T) {
	dir := t.TempDir()
	htpasswd(t, dir, "alice", "wonderland")
	c, err := Parse(filepath.Join(dir, "t.yaml"), []byte(routesFile(`  - path_prefix: /a/
    upstream: web
    basic_auth: {file: users, realm: Staff, forward_authorization: true}
  - upstream: web
    basic_auth: {file: users}
`)))
	if err != nil {
		t.Fatal(err)
	}
	ba := c.Routes[0].BasicAuth
	if ba == nil || ba.File != filepath.Join(dir, "users") || ba.Realm != "Staff" || !ba.ForwardAuthorization || ba.users == nil || ba.users.Len() != 1 || ba.Line != 6 {
		t.Errorf("route 0: %+v", ba)
	}
	if ba := c.Routes[1].BasicAuth; ba == nil || ba.Realm != auth.DefaultRealm || ba.ForwardAuthorization {
		t.Errorf("route 1: %+v", ba)
	}
}

func TestRouteBasicAuthProblems(t *testing.T) {
	dir := t.TempDir()
	users := htpasswd(t, dir, "alice", "x")
	md5 := filepath.Join(dir, "md5")
	if err := os.WriteFile(md5, []byte("# old\nbob:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, route string
		line, col   int
		path, msg   string
	}{
		{"no file", "{}", 4, 33, "routes[0].basic_auth.file", "missing; it is required"},
		{"missing file", "{file: nope}", 4, 40, "routes[0].basic_auth.file", "nope does not exist (a relative path is relative to the config file's directory)"},
		{"md5", "{file: " + md5 + "}", 4, 40, "routes[0].basic_auth.file", md5 + `: line 2: user "bob": an Apache MD5 hash ($apr1$, htpasswd -m, its default before 2.4); only bcrypt hashes are accepted (htpasswd -B)`},
		{"bad realm", "{file: " + users + ", realm: 'a\"b'}", 4, 49 + len(users), "routes[0].basic_auth.realm", `the realm holds '"': printable ASCII without " or \ only`},
		{"empty realm", "{file: " + users + ", realm: ''}", 4, 49 + len(users), "routes[0].basic_auth.realm", "must not be empty; leave it out for restricted"},
		{"unknown key", "{file: " + users + ", realms: x}", 4, 42 + len(users), "routes[0].basic_auth.realms", `did you mean "realm"?`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(dir, "t.yaml"), []byte(routesFile("  - {upstream: web, basic_auth: "+tt.route+"}\n")))
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

func TestRouteForwardAuth(t *testing.T) {
	c, err := Parse("t.yaml", []byte(routesFile(`  - upstream: web
    forward_auth:
      address: 127.0.0.1:9091
      path: /verify?a=b
      request_headers: [Cookie]
      response_headers: [Remote-User]
      timeouts: {response: 1s}
      max_body: 1KiB
  - upstream: web
    forward_auth: {address: "unix:/run/auth.sock", request_headers: []}
`)))
	if err != nil {
		t.Fatal(err)
	}
	fa := c.Routes[0].ForwardAuth
	want := ForwardAuth{Address: "127.0.0.1:9091", Path: "/verify?a=b", RequestHeaders: []string{"Cookie"}, ResponseHeaders: []string{"Remote-User"},
		Timeouts: ForwardAuthTimeouts{Connect: 2 * time.Second, Response: time.Second}, MaxBody: 1 << 10, Line: 6}
	if fa == nil || !reflect.DeepEqual(*fa, want) {
		t.Errorf("route 0:\n got %+v\nwant %+v", fa, want)
	}
	fa = c.Routes[1].ForwardAuth
	if fa == nil || fa.Path != "/" || fa.RequestHeaders == nil || len(fa.RequestHeaders) != 0 || fa.ResponseHeaders != nil || fa.MaxBody != 64<<10 {
		t.Errorf("route 1: %+v", fa)
	}
}

func TestRouteForwardAuthProblems(t *testing.T) {
	tests := []struct {
		name, route string
		line, col   int
		path, msg   string
	}{
		{"no address", "{path: /x}", 4, 35, "routes[0].forward_auth.address", "missing; it is required"},
		{"bad address", "{address: 'nohost'}", 4, 45, "routes[0].forward_auth.address", "is not a host:port address"},
		{"relative path", "{address: 'a:1', path: verify}", 4, 58, "routes[0].forward_auth.path", "must start with /"},
		{"framing field", "{address: 'a:1', request_headers: [Content-Length]}", 4, 35, "routes[0].forward_auth", "request header Content-Length is not the client's to pass on"},
		{"hop-by-hop answer field", "{address: 'a:1', response_headers: [Connection]}", 4, 35, "routes[0].forward_auth", "response header Connection cannot be copied into a request"},
		{"not a list", "{address: 'a:1', response_headers: Remote-User}", 4, 70, "routes[0].forward_auth.response_headers", "must be a list of field names, such as [Remote-User]"},
		{"bad name", "{address: 'a:1', response_headers: ['a b']}", 4, 71, "routes[0].forward_auth.response_headers[0]", "is not a valid HTTP field name"},
		{"zero timeout", "{address: 'a:1', timeouts: {response: 0s}}", 4, 73, "routes[0].forward_auth.timeouts.response", "must be"},
		{"body too big", "{address: 'a:1', max_body: 1GiB}", 4, 62, "routes[0].forward_auth.max_body", "must be between"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(routesFile("  - {upstream: web, forward_auth: "+tt.route+"}\n")))
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
