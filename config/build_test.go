package config_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy"
)

// serve builds a proxy from the YAML, lets set (if not nil) change the
// Server, and serves it on 127.0.0.1:0. The Resources are closed after
// the test's Shutdown; a test may close them before.
func serve(t *testing.T, yaml string, set func(*proxy.Server)) (string, *config.Resources) {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := config.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gen.Start(ctx)
	srv, res, err := config.NewServer(cfg, gen, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(srv)
	}
	t.Cleanup(func() {
		// Registered before Serve's, so it runs after the Shutdown.
		cancel()
		gen.Close()
		res.Close()
	})
	return proxytest.Serve(t, srv), res
}

// head returns a config with one upstream, app, of servers (each a YAML
// mapping), to which further keys of app may be appended.
func head(servers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nroutes: [{upstream: app}]\nupstreams:\n  app:\n    servers:\n")
	for _, s := range servers {
		fmt.Fprintf(&b, "      - %s\n", s)
	}
	return b.String()
}

// TestBuildHashKey checks that balance: hash and its hash_key reach the
// upstream group that Build makes: requests with the same X-User go to the
// same server. (Package upstream tests the group's balancing and health.)
func TestBuildHashKey(t *testing.T) {
	var servers []string
	for _, n := range []string{"a", "b", "c"} {
		servers = append(servers, "{address: "+upstreamtest.Start(t, upstreamtest.OK(n)).Addr()+"}")
	}
	addr, _ := serve(t, head(servers...)+"    balance: hash\n    hash_key: header:X-User\n", nil)
	proxytest.Sticky(t, addr, "X-User")
}
