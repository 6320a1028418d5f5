package upstream_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/upstream"
)

// TestTLSGroup: over TLS, a server named by DNS is verified against its
// name, not the address it resolved to; a server whose certificate does
// not verify fails the first request that meets it over to the other
// server, and passive health then takes it out; active checks run over
// TLS.
func TestTLSGroup(t *testing.T) {
	ca := tlstest.NewCA(t, "group CA")
	other := tlstest.NewCA(t, "other CA")
	good := upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{*ca.Server(t, "good.test").TLS}}, upstreamtest.OK("good"))
	bad := upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{*other.Server(t, "127.0.0.1").TLS}}, upstreamtest.OK("bad"))
	_, goodPort, _ := net.SplitHostPort(good.Addr())
	g := upstream.New("app", servers("good.test:"+goodPort, bad.Addr()), new(balance.RoundRobin), balance.Options{
		MaxFails: 1, FailTimeout: time.Minute,
		Resolver: func(_ context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		Active: &balance.ActiveCheck{Path: "/healthz", Interval: 200 * time.Millisecond, Timeout: time.Second},
	}, &proxy.PeerOptions{TLS: &proxy.TLS{Config: &tls.Config{RootCAs: ca.Pool()}}})
	addr, obs := run(t, g, routed(g))
	wait.For(t, "good.test to resolve", func() bool { return g.Balancer().Servers()[0].Addr == good.Addr() })
	for i := 0; i < 10; i++ {
		if code, body := proxytest.Get(t, addr, "/", ""); code != 200 || body != "good" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	if n, fails := obs.get(bad.Addr()); n != 1 || fails != 1 {
		t.Fatalf("the misconfigured server got %d tries, %d failed; want 1 and 1", n, fails)
	}
	wait.For(t, "active checks over TLS", func() bool { return good.Count("GET", "/healthz") >= 2 })
	if bad.Count("GET", "/healthz") != 0 || len(bad.Requests()) != 0 {
		t.Fatal("a request reached the server whose certificate does not verify")
	}
}
