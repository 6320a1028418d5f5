package ratelimit_test

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/ratelimit"
	"github.com/sluice-proxy/sluice/route"
)

// serveLimited serves routes, each with its limiter, in front of an
// upstream answering 200 "ok", and returns the proxy's address and its
// access log.
func serveLimited(t *testing.T, limiters map[string]*ratelimit.Limiter) (string, *proxytest.Buffer) {
	t.Helper()
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	var routes []route.Route
	for prefix, l := range limiters {
		routes = append(routes, route.Route{PathPrefix: prefix, Name: prefix,
			Upstream: proxytest.Peer{P: &proxy.Peer{Addr: up.Addr()}}, Phases: []any{l}})
	}
	log := new(proxytest.Buffer)
	addr := proxytest.Serve(t, &proxy.Server{Handler: route.New(routes...),
		ErrorLog:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(slog.NewTextHandler(log, nil)),
	})
	return addr, log
}

// TestLimiterAnswers429 checks a route's budget over real sockets: the
// burst goes through, the next request gets 429 with Retry-After, the
// RateLimit fields and Proxy-Status, and its access log line says so.
func TestLimiterAnswers429(t *testing.T) {
	l := &ratelimit.Limiter{Name: "api", Key: ratelimit.Route{}, Store: ratelimit.NewLocal(0),
		Policy: ratelimit.Policy{Rate: ratelimit.Rate{Count: 1, Period: time.Minute}, Burst: 2}}
	addr, log := serveLimited(t, map[string]*ratelimit.Limiter{"/": l})
	for i := range 2 {
		resp, body := proxytest.Do(t, addr, "GET / HTTP/1.1\r\nHost: test\r\n\r\n")
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q, want 200 ok", i, resp.StatusCode, body)
		}
		// The upstream's answer says what is left: one request, then
		// none; the budget whole again in a minute, then two.
		want := []string{`"default";r=1;t=60`, `"default";r=0;t=120`}[i]
		if got := resp.Header.Get("RateLimit"); got != want || resp.Header.Get("RateLimit-Policy") != `"default";q=1;w=60;sluice-burst=2` {
			t.Errorf("request %d: RateLimit %q, RateLimit-Policy %q; want %q", i, got, resp.Header.Get("RateLimit-Policy"), want)
		}
	}
	resp, body := proxytest.Do(t, addr, "GET / HTTP/1.1\r\nHost: test\r\n\r\n")
	want := map[string]string{
		"Retry-After":      "60", // the next request a minute on (59.9... s rounded up)
		"RateLimit-Policy": `"default";q=1;w=60;sluice-burst=2`,
		"RateLimit":        `"default";r=0;t=60`,
		"Proxy-Status":     `sluice; error=http_request_denied; details="rate limit 1/m burst 2 exceeded"`,
		"Cache-Control":    "no-store",
	}
	if resp.StatusCode != 429 || !strings.Contains(body, "rate limited") {
		t.Fatalf("third request: %d %q, want 429", resp.StatusCode, body)
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if c := l.Counts(); c != (ratelimit.Counts{Allowed: 2, Limited: 1}) {
		t.Errorf("counts %+v, want 2 allowed, 1 limited", c)
	}
	wait.For(t, "three access log lines", func() bool { return strings.Count(log.String(), "\n") == 3 })
	// A line is written once its answer went out: the lines of requests
	// on different connections may come in either order.
	limitedLines := 0
	for i, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		limited := strings.HasSuffix(line, " rate_limited=true")
		if limited != strings.Contains(line, "status=429") {
			t.Errorf("access log line %d: %q", i, line)
		}
		if limited {
			limitedLines++
		}
	}
	if limitedLines != 1 {
		t.Errorf("%d access log lines say rate_limited=true, want 1", limitedLines)
	}
}

// TestLimiterKeys checks that each key kind keeps budgets apart: header
// values from one another, and requests without the header by client
// address.
func TestLimiterKeys(t *testing.T) {
	oneEach := ratelimit.Policy{Rate: ratelimit.Rate{Count: 1, Period: time.Minute}, Burst: 1}
	addr, _ := serveLimited(t, map[string]*ratelimit.Limiter{
		"/header/": {Key: ratelimit.Header{Name: "X-Api-Key"}, Store: ratelimit.NewLocal(0), Policy: oneEach},
		"/ip/":     {Store: ratelimit.NewLocal(0), Policy: oneEach}, // Key nil: ClientIP
	})
	tests := []struct {
		path, header string
		status       int
	}{
		{"/header/", "X-Api-Key: a\r\n", 200},
		{"/header/", "X-Api-Key: b\r\n", 200},
		{"/header/", "", 200}, // keyed by the client's address
		{"/header/", "X-Api-Key: a\r\n", 429},
		{"/header/", "", 429},
		{"/header/", "X-Api-Key: 127.0.0.1\r\n", 200}, // not the address's budget
		{"/ip/", "X-Api-Key: c\r\n", 200},
		{"/ip/", "X-Api-Key: d\r\n", 429}, // same client
	}
	for i, tt := range tests {
		resp, _ := proxytest.Do(t, addr, "GET "+tt.path+" HTTP/1.1\r\nHost: test\r\n"+tt.header+"\r\n")
		if resp.StatusCode != tt.status {
			t.Errorf("%d: GET %s with %q: %d, want %d", i, tt.path, tt.header, resp.StatusCode, tt.status)
		}
	}
}

// failing is a store that cannot decide.
type failing struct{}

func (failing) Take([]byte, ratelimit.Policy, time.Time) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, errors.New("store down")
}

// TestLimiterStoreError checks OnStoreError: Allow lets requests through,
// Deny answers 503; both are noted and counted, and logged once for many.
func TestLimiterStoreError(t *testing.T) {
	var errLog proxytest.Buffer
	logger := slog.New(slog.NewTextHandler(&errLog, nil))
	p := ratelimit.Policy{Rate: ratelimit.Rate{Count: 1, Period: time.Second}, Burst: 1}
	allow := &ratelimit.Limiter{Name: "allow", Store: failing{}, Policy: p, Log: logger}
	deny := &ratelimit.Limiter{Name: "deny", Store: failing{}, Policy: p, Log: logger, OnStoreError: ratelimit.Deny}
	addr, log := serveLimited(t, map[string]*ratelimit.Limiter{"/allow": allow, "/deny": deny})
	for range 3 {
		if code, _ := proxytest.Get(t, addr, "/allow", ""); code != 200 {
			t.Errorf("allow: %d, want 200", code)
		}
		resp, _ := proxytest.Do(t, addr, "GET /deny HTTP/1.1\r\nHost: test\r\n\r\n")
		if resp.StatusCode != 503 || !strings.HasPrefix(resp.Header.Get("Proxy-Status"), "sluice; error=proxy_internal_error") {
			t.Errorf("deny: %d Proxy-Status %q, want 503 proxy_internal_error", resp.StatusCode, resp.Header.Get("Proxy-Status"))
		}
	}
	for _, l := range []*ratelimit.Limiter{allow, deny} {
		if c := l.Counts(); c != (ratelimit.Counts{StoreError: 3}) {
			t.Errorf("%s: counts %+v, want 3 store errors", l.Name, c)
		}
	}
	wait.For(t, "six access log lines", func() bool { return strings.Count(log.String(), "\n") == 6 })
	if n := strings.Count(log.String(), " rate_limit_store=error\n"); n != 6 {
		t.Errorf("%d access log lines noted rate_limit_store=error, want 6:\n%s", n, log.String())
	}
	if n := strings.Count(errLog.String(), "rate limit store failed"); n != 2 {
		t.Errorf("%d log lines about the store, want 2 (one per limiter):\n%s", n, errLog.String())
	}
}

// TestLimiterCarry checks that a Limiter carrying on from another keeps
// its Local store's state and its counts.
func TestLimiterCarry(t *testing.T) {
	p := ratelimit.Policy{Rate: ratelimit.Rate{Count: 1, Period: time.Minute}, Burst: 1}
	old := &ratelimit.Limiter{Key: ratelimit.Route{}, Store: ratelimit.NewLocal(0), Policy: p}
	addr, _ := serveLimited(t, map[string]*ratelimit.Limiter{"/": old})
	if code, _ := proxytest.Get(t, addr, "/", ""); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	next := &ratelimit.Limiter{Key: ratelimit.Route{}, Store: ratelimit.NewLocal(0), Policy: p}
	next.Carry(old)
	addr, _ = serveLimited(t, map[string]*ratelimit.Limiter{"/": next})
	if code, _ := proxytest.Get(t, addr, "/", ""); code != 429 {
		t.Errorf("after the reload: %d, want 429 (the budget carried over)", code)
	}
	if c := next.Counts(); c != (ratelimit.Counts{Allowed: 1, Limited: 1}) {
		t.Errorf("counts %+v, want 1 allowed (before), 1 limited", c)
	}
}

func TestParseKey(t *testing.T) {
	tests := []struct {
		in   string
		want ratelimit.Key
	}{
		{"client_ip", ratelimit.ClientIP{}},
		{"route", ratelimit.Route{}},
		{"header:X-Api-Key", ratelimit.Header{Name: "X-Api-Key"}},
		{"header:", nil},
		{"header:X Api", nil},
		{"header:a:b", nil},
		{"ip", nil},
		{"", nil},
	}
	for _, tt := range tests {
		got, ok := ratelimit.ParseKey(tt.in)
		if got != tt.want || ok != (tt.want != nil) {
			t.Errorf("ParseKey(%q) = %v, %v; want %v", tt.in, got, ok, tt.want)
		}
	}
}

// TestLimiterAllocations checks that an allowed request of a key the
// Local store holds allocates nothing in the phase.
func TestLimiterAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	l := &ratelimit.Limiter{Store: ratelimit.NewLocal(0),
		Policy: ratelimit.Policy{Rate: ratelimit.Rate{Count: 1_000_000, Period: time.Second}, Burst: 1_000_000}}
	s := &proxy.Session{Client: "10.1.2.3", ClientIP: netip.MustParseAddr("10.1.2.3"), Start: time.Now()}
	l.RequestFilter(s) // the key's first request stores it
	if n := testing.AllocsPerRun(1000, func() {
		if r := l.RequestFilter(s); r != nil {
			t.Fatalf("answered %d", r.Status)
		}
	}); n != 0 {
		t.Errorf("%v allocations per allowed request, want 0", n)
	}
}

// BenchmarkLimiter is the phase's cost for an allowed request, keyed by
// client address, in a Local store, from many goroutines.
func BenchmarkLimiter(b *testing.B) {
	l := &ratelimit.Limiter{Store: ratelimit.NewLocal(0),
		Policy: ratelimit.Policy{Rate: ratelimit.Rate{Count: 1_000_000, Period: time.Second}, Burst: 1_000_000}}
	start := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := &proxy.Session{ClientIP: netip.MustParseAddr("10.1.2.3"), Start: start}
		i := 0
		for pb.Next() {
			s.ClientIP = netip.AddrFrom4([4]byte{10, 1, byte(i>>8) & 3, byte(i)}) // 1024 clients
			l.RequestFilter(s)
			i++
		}
	})
}

func TestClientIPKey(t *testing.T) {
	tests := []struct {
		client string
		want   string
	}{
		{"10.1.2.3", "10.1.2.3"},
		{"::ffff:10.1.2.3", "10.1.2.3"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
		{"::1", "::/64"},
	}
	for _, tt := range tests {
		s := &proxy.Session{Client: tt.client, ClientIP: netip.MustParseAddr(tt.client)}
		if got := string(ratelimit.ClientIP{}.AppendKey(nil, s)); got != tt.want {
			t.Errorf("key of %s: %q, want %q", tt.client, got, tt.want)
		}
	}
	s := &proxy.Session{Client: "@unix"}
	if got := string(ratelimit.ClientIP{}.AppendKey(nil, s)); got != "@unix" {
		t.Errorf("key of a client without an IP address: %q, want its Client", got)
	}
}

// TestLimiterZero checks that a zero Limiter works: a Local store of its
// own, a Rate that limits nothing, no panic.
func TestLimiterZero(t *testing.T) {
	var l ratelimit.Limiter
	s := &proxy.Session{ClientIP: netip.MustParseAddr("10.1.2.3"), Start: time.Now()}
	for i := range 3 {
		if r := l.RequestFilter(s); r != nil {
			t.Fatalf("request %d answered %d", i, r.Status)
		}
	}
	if c := l.Counts(); c.Allowed != 3 {
		t.Errorf("counts %+v, want 3 allowed", c)
	}
}
