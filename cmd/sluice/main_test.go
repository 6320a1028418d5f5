package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/tlstest"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `
listen:
  - address: 127.0.0.1:0
routes:
  - upstream: app
upstreams:
  app:
    servers:
      - address: 127.0.0.1:9001
`)
	two := write("two.yaml", `
listen:
  - address: 127.0.0.1:0
  - address: 127.0.0.1:0
routes:
  - {path_prefix: /a/, upstream: a}
  - upstream: b
upstreams:
  a: {servers: [{address: 127.0.0.1:9001}]}
  b: {servers: [{address: 127.0.0.1:9002}]}
`)
	zero := write("zero.yaml", `
listen:
  - address: 127.0.0.1:0
routes:
  - upstream: app
upstreams:
  app:
    servers:
      - address: 127.0.0.1:9001
    retry:
      tries: 0
`)
	shadowed := write("shadowed.yaml", `
listen:
  - address: 127.0.0.1:0
routes:
  - path_prefix: /
    upstream: app
  - path: /healthz
    upstream: app
upstreams:
  app:
    servers:
      - address: 127.0.0.1:9001
`)
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "example.com").Write(t, dir, "site")
	garbage := write("garbage.pem", "not a certificate\n")
	tlsConfig := func(cert, key string) string {
		return `
listen:
  - address: 127.0.0.1:0
    tls:
      certificates:
        - {cert: ` + cert + `, key: ` + key + `}
routes:
  - upstream: app
upstreams:
  app:
    servers:
      - address: 127.0.0.1:9001
`
	}
	goodTLS := write("tls.yaml", tlsConfig(cert, key))
	missingCert := write("missing.yaml", tlsConfig(filepath.Join(dir, "nowhere.pem"), key))
	badCert := write("bad.yaml", tlsConfig(garbage, key))
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"validate", "-c", goodTLS}, 0, "ok (1 listener, 1 route, 1 upstream)"},
		{[]string{"validate", "-c", missingCert}, 1,
			"missing.yaml:6: listen[0].tls.certificates[0].cert: " + filepath.Join(dir, "nowhere.pem") + ": no such file or directory"},
		{[]string{"validate", "-c", badCert}, 1,
			"bad.yaml:6: listen[0].tls.certificates[0].cert: " + garbage + ": no PEM CERTIFICATE block"},
		{[]string{"validate", "-c", good}, 0, "ok (1 listener, 1 route, 1 upstream)"},
		{[]string{"validate", "-c", two}, 0, "ok (2 listeners, 2 routes, 2 upstreams)"},
		{[]string{"validate", "-c", shadowed}, 0, "warning: " + shadowed + ":7:5: routes[1]: is never matched: the route at line 5 (path_prefix /) comes first"},
		{[]string{"validate", "-c", zero}, 1, "zero.yaml:11:14: upstreams.app.retry.tries: must be >= 1"},
		{[]string{"validate", "-c", filepath.Join(dir, "missing.yaml")}, 1, "no such file"},
		{[]string{"version"}, 0, "sluice "},
		{[]string{"frobnicate"}, 2, "unknown command"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if code != tt.code || !strings.Contains(out, tt.out) {
			t.Errorf("sluice %s: exit %d, output %q; want exit %d and %q", strings.Join(tt.args, " "), code, out, tt.code, tt.out)
		}
	}
}
