package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestErrorPages(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"502.html": "<h1>502</h1>", "404.txt": "not here", "route502.html": "<h1>route</h1>"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Parse(filepath.Join(dir, "t.yaml"), []byte(routesFile(`  - path_prefix: /a/
    upstream: web
    errors: {502: route502.html}
  - upstream: web
errors: {502: 502.html, 404: 404.txt}
`)))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Errors) != 2 || c.Errors[0].Status != 404 || c.Errors[0].File != filepath.Join(dir, "404.txt") || string(c.Errors[1].body) != "<h1>502</h1>" {
		t.Errorf("errors: %+v", c.Errors)
	}
	if e := c.Routes[0].Errors; len(e) != 1 || e[0].Status != 502 || string(e[0].body) != "<h1>route</h1>" {
		t.Errorf("route errors: %+v", e)
	}
	p, err := errorPagesPhase(c.Routes[0].Errors, c.Errors)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Statuses(); len(got) != 2 {
		t.Errorf("merged statuses %v", got)
	}
	if p, err := errorPagesPhase(nil, nil); p != nil || err != nil {
		t.Errorf("no pages: %v, %v", p, err)
	}
}

func TestErrorPageProblems(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "p.html")
	if err := os.WriteFile(page, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, file string
		line, col  int
		path, msg  string
	}{
		{"not a mapping", "errors: [502.html]\n", 8, 9, "errors", "must be a mapping of statuses to files"},
		{"status too low", "errors: {302: p.html}\n", 8, 10, "errors.302", "must be between 400 and 599"},
		{"not a status", "errors: {5xx: p.html}\n", 8, 10, "errors.5xx", "must be"},
		{"twice", "errors: {502: p.html, 502: p.html}\n", 8, 23, "errors.502", "duplicate key (first given at line 8)"},
		{"missing file", "errors: {502: nope.html}\n", 8, 15, "errors.502", "nope.html does not exist"},
		{"no file", "errors: {502: \"\"}\n", 8, 15, "errors.502", "must not be empty"},
		{"route's", "  - {path: /x, upstream: web, errors: {502: nope.html}}\n", 5, 45, "routes[1].errors.502", "does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			routes := "  - upstream: web\n"
			if strings.HasPrefix(tt.file, "  -") {
				routes += tt.file
			} else {
				routes += "  - path: /y\n    upstream: web\n    errors: {502: p.html}\n" + tt.file
			}
			_, err := Parse(filepath.Join(dir, "t.yaml"), []byte(routesFile(routes)))
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
