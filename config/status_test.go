package config_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// statusLine sends request on a new connection to addr and returns the
// status line of the answer as it came, CRLF included.
func statusLine(t *testing.T, addr, request string) string {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, request); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the status line: %v (got %q)", err, line)
	}
	return line
}

// TestStatusLines: the status lines sluice writes itself carry their
// reason phrase (its own errors, the files it serves: 200, 206, 304, 404,
// 416; its redirect to https: 308), and one it relays from an upstream is
// the upstream's, byte for byte: its own phrase, an empty one, a status
// no RFC names.
func TestStatusLines(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	relayed := []string{
		"HTTP/1.1 200 Everything Is Fine\r\n",
		"HTTP/1.1 404 \r\n",
		"HTTP/1.1 299 Custom\r\n",
		"HTTP/1.1 308 Go Elsewhere\r\n",
		"HTTP/1.1 503 Service Unavailable\r\n",
	}
	var routes, ups string
	for i, line := range relayed {
		up := upstreamtest.Start(t, upstreamtest.Raw(line+"Content-Length: 2\r\n\r\nok"))
		routes += fmt.Sprintf("  - {path_prefix: /r%d/, upstream: u%d}\n", i, i)
		ups += fmt.Sprintf("  u%d: {servers: [{address: %s}], retry: {tries: 1}}\n", i, up.Addr())
	}
	yaml := "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nroutes:\n" + routes +
		"  - {path_prefix: /files/, static: {root: " + root + "}}\n" +
		"  - {path_prefix: /dead/, upstream: dead}\n" +
		"upstreams:\n" + ups +
		"  dead: {servers: [{address: " + upstreamtest.Dead(t) + "}], retry: {tries: 1}}\n"
	addr, _ := serve(t, yaml, nil)
	get := func(path, extra string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n" + extra + "\r\n"
	}
	for i, want := range relayed {
		if got := statusLine(t, addr, get(fmt.Sprintf("/r%d/", i), "")); got != want {
			t.Errorf("relayed: got %q, want the upstream's %q", got, want)
		}
	}
	own := []struct {
		request, want string
	}{
		{get("/files/a.txt", ""), "HTTP/1.1 200 OK\r\n"},
		{get("/files/a.txt", "Range: bytes=2-4\r\n"), "HTTP/1.1 206 Partial Content\r\n"},
		{get("/files/a.txt", "Range: bytes=20-30\r\n"), "HTTP/1.1 416 Range Not Satisfiable\r\n"},
		{get("/files/a.txt", "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n"), "HTTP/1.1 304 Not Modified\r\n"},
		{get("/files/none.txt", ""), "HTTP/1.1 404 Not Found\r\n"},
		{get("/dead/", ""), "HTTP/1.1 502 Bad Gateway\r\n"},
		{"GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
	}
	for _, tt := range own {
		if got := statusLine(t, addr, tt.request); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.request, got, tt.want)
		}
	}

	// A plain listener's redirect to https.
	cfg, err := config.Parse("t.yaml", []byte("listen: [{address: 127.0.0.1:0, redirect_https: true}]\naccess_log: {enabled: false}\n"+
		"routes: [{upstream: app}]\nupstreams: {app: {servers: [{address: 127.0.0.1:9}]}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := config.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, res, err := config.NewServer(cfg, gen, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	ls, err := config.NewListeners(cfg, gen)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeWith(ln, ls.Options(0, []net.Addr{ln.Addr()}))
	}()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}()
	if got, want := statusLine(t, ln.Addr().String(), get("/x", "")), "HTTP/1.1 308 Permanent Redirect\r\n"; got != want {
		t.Errorf("redirect: got %q, want %q", got, want)
	}
}
