package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
