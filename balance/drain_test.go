package balance

import (
	"context"
	"errors"
	"testing"
)

// TestDrain: a drained server gets no try from any policy, by any rule,
// panic mode included; Enable gives it tries again.
func TestDrain(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			newPolicy, err := ParsePolicy(name)
			if err != nil {
				t.Fatal(err)
			}
			c := newClock()
			g := NewGroup("u", servers(1, 1, 1), newPolicy(), testOptions(c))
			if !g.Drain("10.0.0.2:80") {
				t.Fatal("Drain of a configured server reported false")
			}
			if g.Drain("10.0.0.9:80") || g.Enable("10.0.0.9:80") {
				t.Fatal("Drain or Enable of an unknown server reported true")
			}
			b := g.Servers()[1]
			if !b.Drained() || !b.Healthy() {
				t.Fatalf("b: drained %v healthy %v; want drained and still healthy", b.Drained(), b.Healthy())
			}
			key := Request{HashKey: []byte("k")}
			for range 30 {
				s, err := g.Pick(key)
				if err != nil {
					t.Fatal(err)
				}
				if s == b {
					t.Fatal("picked the drained server")
				}
				g.Report(s, Result{Status: 200})
			}
			// Every other server tried: rule 3 retries one of them, never b.
			req := Request{Tries: tried{"10.0.0.1:80": failed, "10.0.0.3:80": failed}}
			if s, err := g.Pick(req); err != nil || s == b {
				t.Fatalf("after every other server failed: picked %v, %v", s, err)
			} else {
				g.Report(s, Result{Status: 200})
			}
			if !g.Enable("10.0.0.2:80") || b.Drained() {
				t.Fatal("Enable did not undo Drain")
			}
			req = Request{Tries: tried{"10.0.0.1:80": failed, "10.0.0.3:80": failed}}
			if s, err := g.Pick(req); err != nil || s != b {
				t.Fatalf("enabled server not picked: %v, %v", s, err)
			} else {
				g.Report(s, Result{Status: 200})
			}
		})
	}
}

func TestDrainInPanicMode(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.MaxFails = 1
	o.MaxEjectedPercent = 100
	g := NewGroup("u", servers(1, 1, 1), new(RoundRobin), o)
	for _, s := range g.Servers() {
		fail(g, s, 1)
	}
	g.Drain("10.0.0.1:80")
	got := pickN(t, g, 30, Request{})
	if got["a"] != 0 || got["b"] != 15 || got["c"] != 15 {
		t.Fatalf("panic mode picked %v, want b and c only", got)
	}
}

func TestDrainEveryServer(t *testing.T) {
	g := NewGroup("u", servers(1, 1), nil, testOptions(newClock()))
	g.Drain("10.0.0.1:80")
	g.Drain("10.0.0.2:80")
	_, err := g.Pick(Request{})
	var ns *NoServerError
	if !errors.Is(err, ErrNoServer) || !errors.As(err, &ns) || ns.Reason != "every server is drained" {
		t.Fatalf("Pick with every server drained: %v", err)
	}
	g.Enable("10.0.0.2:80")
	if got := pickN(t, g, 4, Request{}); got["b"] != 4 {
		t.Fatalf("picked %v, want b", got)
	}
}

// TestDrainCarried: a reload (Carry) keeps a server drained while the new
// configuration still has it; one that leaves and comes back is not.
func TestDrainCarried(t *testing.T) {
	o := testOptions(newClock())
	g1 := NewGroup("u", servers(1, 1), nil, o)
	g1.Drain("10.0.0.2:80")
	g2 := NewGroup("u", servers(1, 1, 1), nil, o)
	g2.Carry(g1)
	if ss := g2.Servers(); ss[0].Drained() || !ss[1].Drained() || ss[2].Drained() {
		t.Fatalf("after Carry: drained %v %v %v, want b only", ss[0].Drained(), ss[1].Drained(), ss[2].Drained())
	}
	g3 := NewGroup("u", servers(1), nil, o) // b gone
	g3.Carry(g2)
	g4 := NewGroup("u", servers(1, 1), nil, o) // b back
	g4.Carry(g3)
	if g4.Servers()[1].Drained() {
		t.Fatal("a server that left the configuration came back drained")
	}
}

// TestDrainDNSName: draining a DNS-named server drains every address it
// resolves to, those it gains later included.
func TestDrainDNSName(t *testing.T) {
	dns := &fakeDNS{}
	dns.set(nil, loopback(1, 2)...)
	o := testOptions(newClock())
	o.Resolver = dns.Resolve
	g := NewGroup("u", []*Server{{Addr: "10.0.0.9:80"}, {Name: "app.internal:80"}}, nil, o)
	if err := g.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !g.Drain("app.internal:80") {
		t.Fatal("Drain of a DNS name reported false")
	}
	dns.set(nil, loopback(1, 3)...)
	if err := g.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range g.Servers() {
		if want := s.Name == "app.internal:80"; s.Drained() != want {
			t.Errorf("%s: drained %v, want %v", s, s.Drained(), want)
		}
	}
	if got := pickN(t, g, 10, Request{}); got["i"] != 10 {
		t.Fatalf("picked %v, want 10.0.0.9 only", got)
	}
}
