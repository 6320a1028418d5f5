package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// A reload swaps routes and upstreams while the server keeps serving, and
// a broken file leaves the running configuration alone.
func TestReload(t *testing.T) {
	a := upstreamtest.Start(t, upstreamtest.OK("a"))
	b := upstreamtest.Start(t, upstreamtest.OK("b"))
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	write := func(upstream string) {
		body := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nroutes: [{upstream: app}]\nupstreams:\n  app:\n    servers: [{address: %s}]\n", upstream)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(a.Addr())
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := config.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, closer, err := config.NewServer(cfg, gen, log)
	if err != nil {
		t.Fatal(err)
	}
	listeners, err := config.NewListeners(cfg, gen)
	if err != nil {
		t.Fatal(err)
	}
	r := &running{path: path, cfg: cfg, srv: srv, listeners: listeners, ctx: context.Background(), log: log}
	r.gen.Store(gen)
	t.Cleanup(func() { // registered before Serve's, so it runs after the Shutdown
		r.gen.Load().Close()
		closer.Close()
	})
	addr := proxytest.Serve(t, srv)
	get := func() string {
		_, body := proxytest.Get(t, addr, "/", "")
		return body
	}
	if got := get(); got != "a" {
		t.Fatalf("before reload: %q", got)
	}
	write(b.Addr())
	r.reload()
	if got := get(); got != "b" {
		t.Fatalf("after reload: %q", got)
	}
	os.WriteFile(path, []byte("listen: [{address: 127.0.0.1:0}]\nroutes: [{upstream: nowhere}]\n"), 0o644)
	r.reload()
	if got := get(); got != "b" {
		t.Fatalf("after a broken reload: %q", got)
	}
}
