package static

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/route"
)

// BenchmarkSmallFile GETs a 24-byte file over one keep-alive connection:
// what a static route costs per request, the client's work included.
func BenchmarkSmallFile(b *testing.B) {
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "css"), 0o755); err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "css", "small.css"), []byte("hello from the upstream\n"), 0o644)
	files, err := New(Options{Root: dir, Prefix: "/static/"})
	if err != nil {
		b.Fatal(err)
	}
	defer files.Close()
	addr := proxytest.Serve(b, &proxy.Server{Handler: route.New(route.Route{PathPrefix: "/static/", Phases: []any{files}}),
		ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	req := []byte("GET /static/css/small.css HTTP/1.1\r\nHost: h\r\n\r\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := nc.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.Status)
		}
	}
}
