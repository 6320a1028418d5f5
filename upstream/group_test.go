package upstream_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/retry"
	"github.com/sluice-proxy/sluice/route"
	"github.com/sluice-proxy/sluice/upstream"
)

// tries counts tries per peer address, as an Observer.
type tries struct {
	mu    sync.Mutex
	count map[string]int
	fails map[string]int
}

func (o *tries) Try(s *proxy.Session, a *proxy.Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.count[a.Peer.Addr]++
	if a.Err != nil {
		o.fails[a.Peer.Addr]++
	}
}
func (o *tries) Done(*proxy.Session)                      {}
func (o *tries) BudgetDenied(*proxy.Session, *proxy.Peer) {}

func (o *tries) get(addr string) (int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.count[addr], o.fails[addr]
}

// tried returns addr's count of tries once it reaches want, or after
// wait.Timeout what it is then: Observer.Try runs after the response has gone to the
// client, so the last try may be counted a moment after its response
// arrived.
func (o *tries) tried(addr string, want int) int {
	wait.Until(wait.Timeout, func() bool { n, _ := o.get(addr); return n >= want })
	n, _ := o.get(addr)
	return n
}

// servers returns a server for each address, in order; addresses that
// start with "backup " are backups.
func servers(addrs ...string) []*balance.Server {
	var list []*balance.Server
	for _, a := range addrs {
		addr, backup := strings.CutPrefix(a, "backup ")
		list = append(list, &balance.Server{Addr: addr, Weight: 1, Backup: backup})
	}
	return list
}

// routed returns a Handler that routes every request to g, as the
// config-driven proxy does.
func routed(g *upstream.Group) proxy.Handler {
	return route.New(route.Route{Name: "app", Upstream: g})
}

// run starts g's background work and serves h on 127.0.0.1:0, counting
// its tries.
func run(t *testing.T, g *upstream.Group, h proxy.Handler) (string, *tries) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g.Balancer().Start(ctx)
	t.Cleanup(func() {
		// Registered before Serve's, so it runs after the Shutdown.
		cancel()
		g.Balancer().Close()
	})
	obs := &tries{count: map[string]int{}, fails: map[string]int{}}
	addr := proxytest.Serve(t, &proxy.Server{
		Handler:  h,
		Observer: obs,
		ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	return addr, obs
}

// TestRefusedServerSkippedAfterFailing serves the group both ways a proxy
// can: routed to, and as the Handler itself, whose TryDone must report
// each try for the refused server to go down.
func TestRefusedServerSkippedAfterFailing(t *testing.T) {
	dead := upstreamtest.Dead(t)
	ok := upstreamtest.Start(t, upstreamtest.OK("ok"))
	tests := []struct {
		name    string
		handler func(*upstream.Group) proxy.Handler
	}{
		{"routed", routed},
		{"the group as Handler", func(g *upstream.Group) proxy.Handler { return g }},
	}
	for _, tt := range tests {
		g := upstream.New("app", servers(dead, ok.Addr()), new(balance.RoundRobin),
			balance.Options{MaxFails: 1, FailTimeout: time.Minute}, &proxy.PeerOptions{})
		addr, obs := run(t, g, tt.handler(g))
		for i := 0; i < 20; i++ {
			if code, body := proxytest.Get(t, addr, "/", ""); code != 200 || body != "ok" {
				t.Fatalf("%s: request %d: %d %q", tt.name, i, code, body)
			}
		}
		// The dead server is tried once, fails, and is then out for
		// fail_timeout: every later request goes straight to the live one.
		if n, _ := obs.get(dead); n != 1 {
			t.Fatalf("%s: the refused server was tried %d times, want 1", tt.name, n)
		}
		if n := obs.tried(ok.Addr(), 20); n != 20 {
			t.Fatalf("%s: the live server got %d tries, want 20", tt.name, n)
		}
	}
}

func TestAllServersAnswering503(t *testing.T) {
	// Three servers answer 503, 503 is retried, passive health takes them
	// out: every client still gets an upstream's own 503, never a 502 of
	// sluice's own made without contacting anyone (nginx answered 29 of 30
	// such requests with "no live upstreams").
	var addrs []string
	var ups []*upstreamtest.Server
	for i := 0; i < 3; i++ {
		u := upstreamtest.Start(t, upstreamtest.Status(503, fmt.Sprintf("busy %d", i)))
		ups = append(ups, u)
		addrs = append(addrs, u.Addr())
	}
	g := upstream.New("app", servers(addrs...), nil,
		balance.Options{MaxFails: 1, FailTimeout: time.Minute, Statuses: []int{503}},
		&proxy.PeerOptions{Retry: &retry.Policy{On: retry.OnError | retry.OnTimeout | retry.OnHTTP503}})
	addr, _ := run(t, g, routed(g))
	for i := 0; i < 30; i++ {
		resp, body := proxytest.Do(t, addr, "GET / HTTP/1.1\r\nHost: t\r\n\r\n")
		if resp.StatusCode != 503 || !strings.HasPrefix(body, "busy ") || resp.Header.Get("Proxy-Status") != "" {
			t.Fatalf("request %d: %d %q Proxy-Status %q", i, resp.StatusCode, body, resp.Header.Get("Proxy-Status"))
		}
	}
	total := 0
	for _, u := range ups {
		total += len(u.Requests())
	}
	if total < 30 {
		t.Fatalf("the upstreams saw %d requests for 30 client requests", total)
	}
}

func TestBackupOnlyWhenPrimariesOut(t *testing.T) {
	primary := upstreamtest.Start(t, upstreamtest.OK("primary"))
	dead := upstreamtest.Dead(t)
	backup := upstreamtest.Start(t, upstreamtest.OK("backup"))
	tests := []struct {
		name    string
		primary string
		want    string
	}{
		{"primary up", primary.Addr(), "primary"},
		{"primary dead", dead, "backup"},
	}
	for _, tt := range tests {
		g := upstream.New("app", servers(tt.primary, "backup "+backup.Addr()), nil, balance.Options{}, &proxy.PeerOptions{})
		addr, _ := run(t, g, routed(g))
		for i := 0; i < 10; i++ {
			if code, body := proxytest.Get(t, addr, "/", ""); code != 200 || body != tt.want {
				t.Fatalf("%s: request %d: %d %q, want 200 %q", tt.name, i, code, body, tt.want)
			}
		}
	}
}

func TestActiveCheckTakesServerOut(t *testing.T) {
	var mu sync.Mutex
	sick := false
	handler := func(name string) upstreamtest.Handler {
		return func(c *upstreamtest.Conn, r *upstreamtest.Request) {
			mu.Lock()
			s := sick
			mu.Unlock()
			if r.Target == "/healthz" && s && name == "a" {
				c.Respond(500, "sick")
				return
			}
			c.Respond(200, name)
		}
	}
	a := upstreamtest.Start(t, handler("a"))
	b := upstreamtest.Start(t, handler("b"))
	g := upstream.New("app", servers(a.Addr(), b.Addr()), new(balance.RoundRobin), balance.Options{
		Active: &balance.ActiveCheck{Path: "/healthz", Interval: 20 * time.Millisecond, Timeout: time.Second, Rise: 1, Fall: 2},
	}, &proxy.PeerOptions{})
	addr, _ := run(t, g, routed(g))
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		_, body := proxytest.Get(t, addr, "/", "")
		seen[body] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("round robin over two healthy servers reached %v", seen)
	}
	mu.Lock()
	sick = true
	mu.Unlock()
	// After fall failed checks, a takes no requests.
	wait.For(t, "a failing server to stop receiving requests", func() bool {
		for i := 0; i < 4; i++ {
			if _, body := proxytest.Get(t, addr, "/", ""); body != "b" {
				return false
			}
		}
		return true
	})
	mu.Lock()
	sick = false
	mu.Unlock()
	wait.For(t, "a recovered server to come back", func() bool {
		_, body := proxytest.Get(t, addr, "/", "")
		return body == "a"
	})
}

func TestHashKeyIsSticky(t *testing.T) {
	var addrs []string
	for _, n := range []string{"a", "b", "c"} {
		addrs = append(addrs, upstreamtest.Start(t, upstreamtest.OK(n)).Addr())
	}
	key, err := balance.ParseHashKey("header:X-User")
	if err != nil {
		t.Fatal(err)
	}
	g := upstream.New("app", servers(addrs...), new(balance.Hash), balance.Options{}, &proxy.PeerOptions{})
	g.SetHashKey(key)
	addr, _ := run(t, g, routed(g))
	proxytest.Sticky(t, addr, "X-User")
}

// TestPickAllocations checks that a try's pick and report allocate nothing
// once each server has its peer, with a hash key taken from the request too.
func TestPickAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	key, err := balance.ParseHashKey("client_ip")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		policy balance.Policy
		key    balance.HashKey
	}{
		{"p2c", balance.P2C{}, balance.HashKey{}},
		{"hash on client_ip", new(balance.Hash), key},
	}
	for _, tt := range tests {
		g := upstream.New("app", servers("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"), tt.policy, balance.Options{}, nil)
		g.SetHashKey(tt.key)
		s := &proxy.Session{ClientIP: netip.MustParseAddr("192.0.2.7")}
		try := func() {
			p, err := g.Pick(s)
			if err != nil {
				t.Fatal(err)
			}
			g.TryDone(s, &proxy.Attempt{Peer: p, Status: 200, Wait: time.Millisecond})
		}
		for range 30 {
			try() // every server gets its peer; the scratch buffer grows
		}
		if n := testing.AllocsPerRun(1000, try); n != 0 {
			t.Errorf("%s: Pick+TryDone allocates %v times", tt.name, n)
		}
	}
}

// TestTimedOutServerIsNotPickedAgain: a request that timed out on a server
// after it was sent is never picked for it again, by any policy; with no
// other server, the timeout is the answer, after one send.
func TestTimedOutServerIsNotPickedAgain(t *testing.T) {
	for _, name := range balance.PolicyNames() {
		t.Run(name, func(t *testing.T) {
			newPolicy, err := balance.ParsePolicy(name)
			if err != nil {
				t.Fatal(err)
			}
			slow := upstreamtest.Start(t, upstreamtest.Silent())
			g := upstream.New("app", servers(slow.Addr()), newPolicy(), balance.Options{},
				&proxy.PeerOptions{ResponseHeaderTimeout: 100 * time.Millisecond, Retry: &retry.Policy{Tries: 3, Timeout: -1}})
			addr, obs := run(t, g, routed(g))
			resp, _ := proxytest.Do(t, addr, "GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
			if resp.StatusCode != 504 || !strings.Contains(resp.Header.Get("Proxy-Status"), "http_response_timeout") {
				t.Fatalf("%d %q, want 504 http_response_timeout", resp.StatusCode, resp.Header.Get("Proxy-Status"))
			}
			if n := slow.Count("GET", "/slow"); n != 1 {
				t.Fatalf("the slow server saw the request %d times, want 1", n)
			}
			if n, _ := obs.get(slow.Addr()); n != 1 {
				t.Fatalf("%d tries, want 1", n)
			}
			if o := g.Balancer().Servers()[0].Outstanding(); o != 0 {
				t.Fatalf("%d tries outstanding after the request", o)
			}
		})
	}
}

// fakeClock is a settable clock for balance.Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRecoveredServerProbedAtHalfItsEjection: a server ejected for
// answering 503 that then recovers gets one request at half its ejection,
// and with that answered, its share again; without probes it waits for the
// whole ejection.
func TestRecoveredServerProbedAtHalfItsEjection(t *testing.T) {
	const ejection = 30 * time.Second
	for _, noProbe := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoProbe=%v", noProbe), func(t *testing.T) {
			var mu sync.Mutex
			sick := true
			a := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
				mu.Lock()
				s := sick
				mu.Unlock()
				if s {
					c.Respond(503, "a is sick")
					return
				}
				c.Respond(200, "a")
			})
			b := upstreamtest.Start(t, upstreamtest.OK("b"))
			clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			g := upstream.New("app", servers(a.Addr(), b.Addr()), new(balance.RoundRobin), balance.Options{
				MaxFails: -1, ConsecutiveFailures: 2, BaseEjection: ejection,
				NoProbe: noProbe, Now: clk.Now,
			}, &proxy.PeerOptions{})
			srv := g.Balancer().Servers()[0]
			addr, _ := run(t, g, routed(g))
			get := func() string {
				t.Helper()
				_, body := proxytest.Get(t, addr, "/", "")
				return body
			}

			for i := 0; srv.Healthy(); i++ {
				if i == 20 {
					t.Fatalf("a answered 503 and was not ejected: %s", srv.State())
				}
				get()
			}
			wait.For(t, "every try on a is reported", func() bool { return srv.Outstanding() == 0 })
			mu.Lock()
			sick = false
			mu.Unlock()

			clk.Add(ejection/2 - time.Nanosecond)
			for i := range 10 {
				if body := get(); body != "b" {
					t.Fatalf("request %d before half the ejection: %q, want b", i, body)
				}
			}
			clk.Add(time.Nanosecond)
			want := "a"
			if noProbe {
				want = "b"
			}
			if body := get(); body != want {
				t.Fatalf("the first request at half the ejection: %q, want %s", body, want)
			}
			if noProbe {
				clk.Add(ejection / 2)
			}
			wait.For(t, "a is back", srv.Healthy)
			got := map[string]int{}
			for range 20 {
				got[get()]++
			}
			if got["a"] != 10 || got["b"] != 10 {
				t.Fatalf("after a came back: %v, want 10 each", got)
			}
		})
	}
}
