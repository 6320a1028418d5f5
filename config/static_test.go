package config

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/proxy"
)

// staticConfig is a config whose second route serves files, with the
// route's lines given.
func staticConfig(route string) string {
	return "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n" + route + "  - upstream: web\n" +
		"upstreams:\n  web:\n    servers: [{address: \"127.0.0.1:9001\"}]\n"
}

func TestParseStaticProblems(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.txt")
	os.WriteFile(file, []byte("x"), 0o644)
	tests := []struct {
		name      string
		route     string
		line, col int
		path, msg string
	}{
		{"upstream and static", "  - {path_prefix: /s/, upstream: web, static: {root: " + dir + "}}\n", 3, 5, "routes[0].static", "one of upstream, static or respond; this one gives upstream and static"},
		{"neither", "  - {path_prefix: /s/}\n", 3, 5, "routes[0].upstream", "missing; a route needs an upstream (or static"},
		{"no root", "  - {path_prefix: /s/, static: {index: a.html}}\n", 3, 32, "routes[0].static.root", "missing"},
		{"empty root", "  - {path_prefix: /s/, static: {root: \"\"}}\n", 3, 39, "routes[0].static.root", "must not be empty"},
		{"missing root", "  - {path_prefix: /s/, static: {root: " + dir + "/nope}}\n", 3, 39, "routes[0].static.root", "does not exist"},
		{"root a file", "  - {path_prefix: /s/, static: {root: " + file + "}}\n", 3, 39, "routes[0].static.root", "is not a directory"},
		{"relative root", "  - {path_prefix: /s/, static: {root: nope}}\n", 3, 39, "routes[0].static.root", "nope"},
		{"index with a directory", "  - {path_prefix: /s/, static: {root: " + dir + ", index: a/b.html}}\n", 3, 0, "routes[0].static.index", "must be a file name"},
		{"hidden index", "  - {path_prefix: /s/, static: {root: " + dir + ", index: .x}}\n", 3, 0, "routes[0].static.index", "must be a file name"},
		{"dotfiles not a boolean", "  - {path_prefix: /s/, static: {root: " + dir + ", dotfiles: 1}}\n", 3, 0, "routes[0].static.dotfiles", "must be true or false"},
		{"unknown key", "  - {path_prefix: /s/, static: {root: " + dir + ", listing: true}}\n", 3, 0, "routes[0].static.listing", "unknown key"},
		{"cache_control with a newline", "  - {path_prefix: /s/, static: {root: " + dir + ", cache_control: \"a\\nb\"}}\n", 3, 0, "routes[0].static.cache_control", "visible ASCII"},
		{"not a mapping", "  - {path_prefix: /s/, static: " + dir + "}\n", 3, 32, "routes[0].static", "must be a mapping"},
		{"strip_prefix", "  - {path_prefix: /s/, strip_prefix: true, static: {root: " + dir + "}}\n", 3, 0, "routes[0].strip_prefix", "a static route sends none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(staticConfig(tt.route)))
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) != 1 {
				t.Fatalf("got %v, want one problem", err)
			}
			p := e.Problems[0]
			if p.Line != tt.line || (tt.col != 0 && p.Column != tt.col) || p.Path != tt.path || !strings.Contains(p.Msg, tt.msg) {
				t.Errorf("got  %#v\nwant line %d, column %d, path %q, message containing %q", p, tt.line, tt.col, tt.path, tt.msg)
			}
		})
	}
}

// TestBuildStatic loads a config whose static route has a root relative
// to the file's directory, and serves a file from it through the built
// table.
func TestBuildStatic(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "site", "css"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "site", "css", "a.css"), []byte("a {}"), 0o644)
	cfgFile := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(cfgFile, []byte(staticConfig("  - {path_prefix: /static/, static: {root: site, cache_control: \"max-age=60\"}}\n")), 0o644)
	cfg, err := Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	st := cfg.Routes[0].Static
	if st == nil || st.Root != filepath.Join(dir, "site") || st.Index != "index.html" || st.Dotfiles || st.CacheControl != "max-age=60" || cfg.Routes[0].Upstream != "" {
		t.Fatalf("route 0: %+v, static %+v", cfg.Routes[0], st)
	}
	g, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	addr := proxytest.Serve(t, &proxy.Server{Handler: g.Table, ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))})
	resp, body := proxytest.Do(t, addr, "GET /static/css/a.css HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp.StatusCode != 200 || body != "a {}" || resp.Header.Get("Cache-Control") != "max-age=60" {
		t.Errorf("GET /static/css/a.css: %d %q, Cache-Control %q", resp.StatusCode, body, resp.Header.Get("Cache-Control"))
	}
	if status, _ := proxytest.Get(t, addr, "/static/%2e%2e/sluice.yaml", ""); status != 400 {
		t.Errorf("GET /static/%%2e%%2e/sluice.yaml: %d, want 400", status)
	}
}
