package config_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/ratelimit"
)

// TestBuildRateLimit checks that a route's rate_limit becomes its phase:
// the API route's budget runs out, the other route has none; and that a
// reload's generation carries the local budgets and counts on (Carry).
func TestBuildRateLimit(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	yaml := "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nroutes:\n" +
		"  - {path_prefix: /api/, upstream: app, rate_limit: {rate: 1/m, burst: 2, key: route}}\n" +
		"  - {upstream: app}\n" +
		"upstreams:\n  app:\n    servers: [{address: \"" + up.Addr() + "\"}]\n"
	build := func() *config.Generation {
		cfg, err := config.Parse("t.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		g, err := config.Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		g.Start(ctx)
		t.Cleanup(func() { cancel(); g.Close() })
		return g
	}
	srv := &proxy.Server{ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))}
	g1 := build()
	srv.Handler = g1.Table
	addr := proxytest.Serve(t, srv)
	for i, want := range []int{200, 200, 429} {
		if code, _ := proxytest.Get(t, addr, "/api/x", ""); code != want {
			t.Errorf("/api/x request %d: %d, want %d", i, code, want)
		}
	}
	if code, _ := proxytest.Get(t, addr, "/other", ""); code != 200 {
		t.Errorf("/other: %d, want 200", code)
	}
	// A reload: the next generation carries the budget on.
	g2 := build()
	g2.Carry(g1)
	srv.SetHandler(g2.Table)
	if code, _ := proxytest.Get(t, addr, "/api/x", ""); code != 429 {
		t.Errorf("/api/x after the reload: %d, want 429", code)
	}
	got := map[string]ratelimit.Counts{}
	g2.RateLimits(func(route string, c ratelimit.Counts) { got[route] = c })
	if len(got) != 1 || got["*/api/"] != (ratelimit.Counts{Allowed: 2, Limited: 2}) {
		t.Errorf("rate limit counts: %+v, want */api/ with 2 allowed, 2 limited", got)
	}
}

// TestBuildRateLimitRedisDown checks the wiring of store: redis: with
// the redis section's server gone (a port nothing listens on), each
// route's on_store_error applies.
func TestBuildRateLimitRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	addr, _ := serve(t, "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\n"+
		"redis: {address: \""+dead+"\"}\nroutes:\n"+
		"  - {path_prefix: /deny/, upstream: app, rate_limit: {rate: 1/s, store: redis, on_store_error: deny}}\n"+
		"  - {upstream: app, rate_limit: {rate: 1/s, store: redis, store_timeout: 100ms}}\n"+
		"upstreams:\n  app:\n    servers: [{address: \""+up.Addr()+"\"}]\n", nil)
	for range 3 {
		if code, _ := proxytest.Get(t, addr, "/deny/x", ""); code != 503 {
			t.Errorf("/deny/x with Redis down: %d, want 503", code)
		}
		if code, _ := proxytest.Get(t, addr, "/x", ""); code != 200 {
			t.Errorf("/x with Redis down: %d, want 200", code)
		}
	}
}
