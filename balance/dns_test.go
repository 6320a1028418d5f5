package balance

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// loopback returns the addresses 127.0.0.n for each n.
func loopback(ns ...int) []netip.Addr {
	var as []netip.Addr
	for _, n := range ns {
		as = append(as, netip.AddrFrom4([4]byte{127, 0, 0, byte(n)}))
	}
	return as
}

// fakeDNS answers lookups with a settable answer or error and counts them.
type fakeDNS struct {
	mu     sync.Mutex
	answer []netip.Addr
	err    error
	calls  int
	hosts  []string
}

func (d *fakeDNS) set(err error, addrs ...netip.Addr) {
	d.mu.Lock()
	d.answer, d.err = addrs, err
	d.mu.Unlock()
}

func (d *fakeDNS) lookups() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

func (d *fakeDNS) Resolve(_ context.Context, host string) ([]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	d.hosts = append(d.hosts, host)
	// Answers come in any order; the group sorts them.
	out := slices.Clone(d.answer)
	slices.Reverse(out)
	return out, d.err
}

func addrs(g *Group) string {
	var as []string
	for _, s := range g.Servers() {
		as = append(as, s.Addr)
	}
	return strings.Join(as, " ")
}

func TestDNSReResolutionMovesTraffic(t *testing.T) {
	c := newClock()
	dns := &fakeDNS{}
	dns.set(nil, loopback(1, 2)...)
	o := testOptions(c)
	o.Resolver = dns.Resolve
	o.MaxFails, o.FailTimeout = 1, time.Minute
	g := NewGroup("u", []*Server{
		{Addr: "10.0.0.9:80"},
		{Name: "app.internal:8080", Weight: 2, ResolveInterval: 10 * time.Millisecond},
	}, new(RoundRobin), o)
	g.Start(context.Background())
	defer g.Close()

	wait.For(t, "the first answer", func() bool { return addrs(g) == "10.0.0.9:80 127.0.0.1:8080 127.0.0.2:8080" })
	ss := g.Servers()
	kept := ss[2] // 127.0.0.2, in both answers
	if kept.Name != "app.internal:8080" || kept.Weight != 2 {
		t.Fatalf("resolved server %+v", kept)
	}
	fail(g, kept, 1) // down for a minute
	if kept.Healthy() {
		t.Fatal("not down after a failure")
	}

	dns.set(nil, loopback(2, 3)...)
	wait.For(t, "the new answer", func() bool { return addrs(g) == "10.0.0.9:80 127.0.0.2:8080 127.0.0.3:8080" })
	ss = g.Servers()
	if ss[1] != kept {
		t.Fatal("the server whose address stayed was replaced")
	}
	if kept.Healthy() || !strings.HasPrefix(kept.State(), "down until") {
		t.Fatalf("the server whose address stayed lost its state: %s", kept.State())
	}
	got := pickN(t, g, 300, Request{})
	if got["127.0.0.1:8080"] != 0 || got["127.0.0.2:8080"] != 0 || got["127.0.0.3:8080"] != 200 || got["i"] != 100 {
		t.Fatalf("picks %v: want 127.0.0.3 (weight 2) and 10.0.0.9 only", got)
	}
	dns.mu.Lock()
	defer dns.mu.Unlock()
	if dns.hosts[0] != "app.internal" {
		t.Fatalf("looked up %q", dns.hosts[0])
	}
}

func TestDNSFailureKeepsLastAddresses(t *testing.T) {
	dns := &fakeDNS{}
	dns.set(nil, loopback(1, 2)...)
	o := testOptions(newClock())
	o.Resolver = dns.Resolve
	g := NewGroup("u", []*Server{{Name: "app.internal:80", ResolveInterval: 10 * time.Millisecond}}, nil, o)
	if err := g.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "127.0.0.1:80 127.0.0.2:80"
	if got := addrs(g); got != want {
		t.Fatalf("servers %q", got)
	}
	g.Start(context.Background())
	defer g.Close()

	for _, tt := range []struct {
		name string
		err  error
	}{
		{"error", errors.New("SERVFAIL")},
		{"empty answer", nil},
	} {
		dns.set(tt.err)
		n := dns.lookups()
		wait.For(t, "more lookups", func() bool { return dns.lookups() >= n+2 })
		if got := addrs(g); got != want {
			t.Fatalf("%s: servers %q, want the last good %q", tt.name, got, want)
		}
		if _, err := g.Pick(Request{}); err != nil {
			t.Fatalf("%s: Pick: %v", tt.name, err)
		}
	}

	err := g.Resolve(context.Background())
	var re *ResolveError
	if !errors.As(err, &re) || re.Name != "app.internal:80" || !errors.Is(err, errNoAddresses) {
		t.Fatalf("Resolve error %v", err)
	}
}

func TestDNSFailureBeforeAnyAnswer(t *testing.T) {
	dns := &fakeDNS{}
	dns.set(errors.New("no such host"))
	o := testOptions(newClock())
	o.Resolver = dns.Resolve
	g := NewGroup("u", []*Server{{Name: "app.internal:80"}}, nil, o)
	if err := g.Resolve(context.Background()); err == nil {
		t.Fatal("Resolve succeeded")
	}
	_, err := g.Pick(Request{})
	var ne *NoServerError
	if !errors.As(err, &ne) || ne.Reason != "resolving app.internal:80: no such host" {
		t.Fatalf("Pick error %v", err)
	}
}

func TestDNSAddedServerSlowStarts(t *testing.T) {
	c := newClock()
	dns := &fakeDNS{}
	dns.set(nil, loopback(1)...)
	o := testOptions(c)
	o.Resolver = dns.Resolve
	o.SlowStart = time.Minute
	g := NewGroup("u", []*Server{{Name: "app.internal:80"}}, nil, o)
	g.Resolve(context.Background())
	dns.set(nil, loopback(1, 2)...)
	g.Resolve(context.Background())
	ss := g.Servers()
	if st := ss[0].State(); st != "healthy" {
		t.Errorf("first answer's server: %s, want no slow start", st)
	}
	if st := ss[1].State(); st != "healthy (slow start, 10% weight)" {
		t.Errorf("added server: %s, want slow start", st)
	}
}

func TestNamesAndLiterals(t *testing.T) {
	tests := []struct {
		addr, name string
		resolved   bool
		want       string
	}{
		{"192.0.2.1:80", "", false, "192.0.2.1:80"},
		{"", "192.0.2.1:80", false, "192.0.2.1:80"},
		{"[2001:db8::1]:443", "", false, "[2001:db8::1]:443"},
		{"", "app.internal:8080", true, "127.0.0.1:8080 [::1]:8080"},
		{"localhost:80", "", true, "127.0.0.1:80 [::1]:80"},
	}
	for _, tt := range tests {
		t.Run(tt.addr+tt.name, func(t *testing.T) {
			dns := &fakeDNS{}
			dns.set(nil, netip.MustParseAddr("::1"), netip.MustParseAddr("::ffff:127.0.0.1"))
			o := testOptions(newClock())
			o.Resolver = dns.Resolve
			g := NewGroup("u", []*Server{{Addr: tt.addr, Name: tt.name}}, nil, o)
			if err := g.Resolve(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := addrs(g); got != tt.want || (dns.lookups() > 0) != tt.resolved {
				t.Fatalf("servers %q after %d lookups", got, dns.lookups())
			}
		})
	}
}

func TestCarry(t *testing.T) {
	c := newClock()
	dns := &fakeDNS{}
	dns.set(nil, loopback(1, 2)...)
	o := testOptions(c)
	o.Resolver = dns.Resolve
	o.MaxFails, o.FailTimeout = 1, time.Minute
	o.SlowStart = time.Minute
	old := NewGroup("u", []*Server{
		{Addr: "10.0.0.1:80"},
		{Addr: "10.0.0.2:80"},
		{Name: "app.internal:80"},
	}, nil, o)
	if err := old.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range old.Servers() {
		if s.Addr == "10.0.0.1:80" || s.Addr == "127.0.0.2:80" {
			fail(old, s, 1)
		}
	}

	// The reload drops 10.0.0.2, adds 10.0.0.3 and reweights the name.
	dns.set(errors.New("lookups are down during the reload"))
	g := NewGroup("u", []*Server{
		{Addr: "10.0.0.1:80"},
		{Addr: "10.0.0.3:80"},
		{Name: "app.internal:80", Weight: 5},
	}, nil, o)
	g.Carry(old)
	var states []string
	for _, s := range g.Servers() {
		states = append(states, fmt.Sprintf("%s w%d %s", s.Addr, s.Weight, strings.SplitN(s.State(), " (", 2)[0]))
	}
	want := []string{
		"10.0.0.1:80 w0 down until 2026-01-02T03:05:05Z",
		"10.0.0.3:80 w0 healthy", // added: slow start
		"127.0.0.1:80 w5 healthy",
		"127.0.0.2:80 w5 down until 2026-01-02T03:05:05Z",
	}
	if !slices.Equal(states, want) {
		t.Fatalf("after Carry:\n%s\nwant\n%s", strings.Join(states, "\n"), strings.Join(want, "\n"))
	}
	if st := g.Servers()[1].State(); st != "healthy (slow start, 10% weight)" {
		t.Fatalf("added server: %s", st)
	}
	if st := g.Servers()[2].State(); st != "healthy" {
		t.Fatalf("carried server: %s", st)
	}
	// The old generation's servers are untouched and still its own.
	if s := old.Servers()[0]; s.g != old || s.Healthy() {
		t.Fatal("Carry changed the old group's server")
	}
}

func TestServerInTwoGroupsIsCopied(t *testing.T) {
	ss := servers(1, 1)
	a := NewGroup("a", ss, nil, testOptions(newClock()))
	b := NewGroup("b", ss, nil, testOptions(newClock()))
	if a.Servers()[0] == b.Servers()[0] || b.Servers()[0].Addr != ss[0].Addr {
		t.Fatal("a server in two groups is shared")
	}
}
