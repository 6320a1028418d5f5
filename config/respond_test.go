package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRouteRespond(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "down.html"), []byte("<h1>down</h1>"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Parse(filepath.Join(dir, "t.yaml"), []byte(routesFile(`  - path_regex: ^/old/(.*)$
    respond: {location: /new/$1}
  - path: /down
    respond: {status: 503, body_file: down.html, headers: {Retry-After: "60"}}
  - path: /ok
    respond: {body: "ok\n", headers: {X-A: [1, 2]}}
  - upstream: web
`)))
	if err != nil {
		t.Fatal(err)
	}
	if rs := c.Routes[0].Respond; rs == nil || rs.Status != 302 || rs.Location != "/new/$1" || len(rs.body) != 0 {
		t.Errorf("route 0: %+v", rs)
	}
	if rs := c.Routes[1].Respond; rs == nil || rs.Status != 503 || rs.BodyFile != filepath.Join(dir, "down.html") || string(rs.body) != "<h1>down</h1>" {
		t.Errorf("route 1: %+v", rs)
	}
	rs := c.Routes[2].Respond
	if rs == nil || rs.Status != 200 || rs.Body != "ok\n" || string(rs.body) != "ok\n" || len(rs.Headers) != 2 {
		t.Fatalf("route 2: %+v", rs)
	}
	p, err := respondPhase(c.Routes[1].Respond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := p.RequestFilter(nil); r.Status != 503 || string(r.Header.Get("Content-Type")) != "text/html; charset=utf-8" || string(r.Body) != "<h1>down</h1>" {
		t.Errorf("route 1's answer: %d %q %q", r.Status, r.Header.Get("Content-Type"), r.Body)
	}
}

func TestRouteRespondProblems(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.html")
	if err := os.WriteFile(big, make([]byte, maxFileBody+1), 0o644); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small.html")
	if err := os.WriteFile(small, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, routes string
		line, col    int
		path, msg    string
	}{
		{"upstream too", "  - {upstream: web, respond: {body: x}}\n", 4, 5, "routes[0].respond", "a route has one of upstream, static or respond; this one gives upstream and respond"},
		{"status out of range", "  - {respond: {status: 99}}\n", 4, 24, "routes[0].respond.status", "must be between 200 and 599"},
		{"location on a 200", "  - {respond: {status: 200, location: /x}}\n", 4, 15, "routes[0].respond", "a location goes with a redirect (301, 302, 303, 307, 308) or 201, not 200"},
		{"body on a 204", "  - {respond: {status: 204, body: x}}\n", 4, 15, "routes[0].respond", "a 204 has no body"},
		{"location capture", "  - {path: /a, respond: {location: /$1}}\n", 4, 36, "routes[0].respond.location", "there is no regular expression to capture with"},
		{"location variable", "  - {path_regex: ^/(a), respond: {location: /$1$hots}}\n", 4, 45, "routes[0].respond.location", "$hots is neither"},
		{"location with a space", "  - {respond: {location: '/a b'}}\n", 4, 26, "routes[0].respond.location", "only visible ASCII"},
		{"Location twice", "  - {respond: {location: /a, headers: {Location: /b}}}\n", 4, 15, "routes[0].respond", "Location is given twice"},
		{"bad field", "  - {respond: {headers: {Content-Length: 5}}}\n", 4, 26, "routes[0].respond.headers.Content-Length", "frames the body"},
		{"body twice", "  - {respond: {body: x, body_file: " + small + "}}\n", 4, 36, "routes[0].respond.body_file", "the body is given twice"},
		{"missing file", "  - {respond: {body_file: nope.html}}\n", 4, 27, "routes[0].respond.body_file", "nope.html does not exist (a relative path is relative to the config file's directory)"},
		{"big file", "  - {respond: {body_file: " + big + "}}\n", 4, 27, "routes[0].respond.body_file", "is over 1MiB"},
		{"directory", "  - {respond: {body_file: " + dir + "}}\n", 4, 27, "routes[0].respond.body_file", "is not a regular file"},
		{"with rewrite", "  - {path_regex: ^/(a), rewrite: /b, respond: {body: x}}\n", 4, 47, "routes[0].respond", "sends nothing upstream, so rewrite has no path to rewrite"},
		{"with strip", "  - {path_prefix: /a/, strip_prefix: true, respond: {body: x}}\n", 4, 53, "routes[0].respond", "sends nothing upstream, so strip_prefix has no path to strip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(dir, "t.yaml"), []byte(routesFile(tt.routes)))
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
