package config_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy"
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

// tried returns addr's count of tries once it reaches want, or after 5s
// what it is then: Observer.Try runs after the response has gone to the
// client, so the last try may be counted a moment after its response
// arrived.
func (o *tries) tried(addr string, want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, _ := o.get(addr)
		if n >= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// run builds a proxy from the YAML and serves it on 127.0.0.1:0, counting
// its tries.
func run(t *testing.T, yaml string) (string, *tries) {
	t.Helper()
	obs := &tries{count: map[string]int{}, fails: map[string]int{}}
	addr, _ := serve(t, yaml, func(srv *proxy.Server) { srv.Observer = obs })
	return addr, obs
}

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

func get(t *testing.T, addr, path, extra string) (int, string, http.Header) {
	t.Helper()
	resp, body := proxytest.Do(t, addr, "GET "+path+" HTTP/1.1\r\nHost: t\r\n"+extra+"\r\n")
	return resp.StatusCode, body, resp.Header
}

func head(addr string, servers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nroutes: [{upstream: app}]\nupstreams:\n  app:\n    servers:\n")
	for _, s := range servers {
		fmt.Fprintf(&b, "      - %s\n", s)
	}
	return b.String()
}

func TestRefusedServerSkippedAfterFailing(t *testing.T) {
	dead := upstreamtest.Dead(t)
	ok := upstreamtest.Start(t, upstreamtest.OK("ok"))
	addr, obs := run(t, head("", "{address: "+dead+"}", "{address: "+ok.Addr()+"}")+
		"    balance: round_robin\n    health: {passive: {max_fails: 1, fail_timeout: 1m}}\n")
	for i := 0; i < 20; i++ {
		if code, body, _ := get(t, addr, "/", ""); code != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	// The dead server is tried once, fails, and is then out for
	// fail_timeout: every later request goes straight to the live one.
	if n, _ := obs.get(dead); n != 1 {
		t.Fatalf("the refused server was tried %d times, want 1", n)
	}
	if n := obs.tried(ok.Addr(), 20); n != 20 {
		t.Fatalf("the live server got %d tries, want 20", n)
	}
}

func TestAllServersAnswering503(t *testing.T) {
	// Three servers answer 503, http_503 is retried, passive health takes
	// them out: every client still gets an upstream's own 503, never a 502
	// of sluice's own made without contacting anyone (nginx answered 29
	// of 30 such requests with "no live upstreams").
	var servers []string
	var ups []*upstreamtest.Server
	for i := 0; i < 3; i++ {
		u := upstreamtest.Start(t, upstreamtest.Status(503, fmt.Sprintf("busy %d", i)))
		ups = append(ups, u)
		servers = append(servers, "{address: "+u.Addr()+"}")
	}
	addr, _ := run(t, head("", servers...)+"    retry: {on: [error, timeout, http_503]}\n"+
		"    health: {passive: {max_fails: 1, fail_timeout: 1m, statuses: [503]}}\n")
	for i := 0; i < 30; i++ {
		code, body, h := get(t, addr, "/", "")
		if code != 503 || !strings.HasPrefix(body, "busy ") || h.Get("Proxy-Status") != "" {
			t.Fatalf("request %d: %d %q Proxy-Status %q", i, code, body, h.Get("Proxy-Status"))
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
	addr, _ := run(t, head("", "{address: "+primary.Addr()+"}", "{address: "+backup.Addr()+", backup: true}"))
	for i := 0; i < 10; i++ {
		if _, body, _ := get(t, addr, "/", ""); body != "primary" {
			t.Fatalf("request %d went to %q", i, body)
		}
	}
	addr2, _ := run(t, head("", "{address: "+dead+"}", "{address: "+backup.Addr()+", backup: true}"))
	for i := 0; i < 5; i++ {
		if code, body, _ := get(t, addr2, "/", ""); code != 200 || body != "backup" {
			t.Fatalf("request %d with the primary dead: %d %q", i, code, body)
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
	addr, _ := run(t, head("", "{address: "+a.Addr()+"}", "{address: "+b.Addr()+"}")+
		"    balance: round_robin\n    health: {active: {path: /healthz, interval: 20ms, timeout: 1s, rise: 1, fall: 2}}\n")
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		_, body, _ := get(t, addr, "/", "")
		seen[body] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("round robin over two healthy servers reached %v", seen)
	}
	mu.Lock()
	sick = true
	mu.Unlock()
	// After fall failed checks, a takes no requests.
	deadline := time.Now().Add(5 * time.Second)
	for {
		allB := true
		for i := 0; i < 4; i++ {
			if _, body, _ := get(t, addr, "/", ""); body != "b" {
				allB = false
			}
		}
		if allB {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a failing server kept receiving requests")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	sick = false
	mu.Unlock()
	deadline = time.Now().Add(5 * time.Second)
	for {
		if _, body, _ := get(t, addr, "/", ""); body == "a" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a recovered server never came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHashKeyIsSticky(t *testing.T) {
	var servers []string
	for _, n := range []string{"a", "b", "c"} {
		servers = append(servers, "{address: "+upstreamtest.Start(t, upstreamtest.OK(n)).Addr()+"}")
	}
	addr, _ := run(t, head("", servers...)+"    balance: hash\n    hash_key: header:X-User\n")
	spread := map[string]bool{}
	for u := 0; u < 20; u++ {
		user := fmt.Sprintf("X-User: user-%d\r\n", u)
		_, first, _ := get(t, addr, "/", user)
		spread[first] = true
		for i := 0; i < 3; i++ {
			if _, body, _ := get(t, addr, "/", user); body != first {
				t.Fatalf("user %d went to %s, then %s", u, first, body)
			}
		}
	}
	if len(spread) < 2 {
		t.Fatalf("20 users all hashed to %v", spread)
	}
}
