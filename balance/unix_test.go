package balance

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestUnixServer: a server at a Unix socket is an address to dial, not a
// name to resolve (the group has it at once, and never asks the
// resolver), and active checks reach it: HTTP checks with "Host:
// localhost", since a socket has no host, and TCP checks.
func TestUnixServer(t *testing.T) {
	dir, err := os.MkdirTemp("", "bx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ct := serveCheckTarget(t, ok200, ln)

	for _, tcp := range []bool{false, true} {
		o := testOptions(newClock())
		o.Resolver = func(context.Context, string) ([]netip.Addr, error) {
			t.Errorf("the resolver was asked about a Unix socket")
			return nil, nil
		}
		o.Active = fastChecks()
		o.Active.TCP = tcp
		g := NewGroup("u", []*Server{{Addr: ct.addr()}}, nil, o)
		servers := g.Servers()
		if len(servers) != 1 || servers[0].Addr != ct.addr() || servers[0].Host() != "" {
			t.Fatalf("servers %v, want %s with no host", servers, ct.addr())
		}
		g.Start(context.Background())
		before := ct.conns.Load()
		wait.For(t, "a few checks", func() bool { return ct.conns.Load() >= before+3 })
		if s := servers[0]; !s.Healthy() {
			t.Errorf("tcp=%v: unhealthy: %s", tcp, s.State())
		}
		if !tcp {
			ct.response.Store(err500)
			wait.For(t, "the server to be taken out", func() bool { return !servers[0].Healthy() })
			ct.response.Store(ok200)
		}
		g.Close()
	}
	want := "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nUser-Agent: sluice-health-check\r\n\r\n"
	if reqs := ct.requestsSeen(); len(reqs) == 0 || reqs[0] != want {
		t.Fatalf("check requests %q, want %q first", reqs, want)
	}
}
