package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"validate", "-c", good}, 0, "ok (1 listeners, 1 routes, 1 upstreams)"},
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
