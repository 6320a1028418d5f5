package balance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

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

// lockedRand is a seeded source safe for concurrent use.
type lockedRand struct {
	mu  sync.Mutex
	src *rand.PCG
}

func newRand(seed uint64) *lockedRand { return &lockedRand{src: rand.NewPCG(seed, seed^0x5eed)} }

func (r *lockedRand) Uint64() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.src.Uint64()
}

// tried is a Tries made of a set of addresses.
// tried says what the request went through at each address: a failed try,
// or one that timed out after the request was sent, which also excludes
// the server.
type tried map[string]outcome

type outcome uint8

const (
	failed outcome = iota + 1
	excluded
)

func (t tried) Tried(addr string) bool    { return t[addr] != 0 }
func (t tried) Excluded(addr string) bool { return t[addr] == excluded }

// servers returns servers a, b, c, … at 10.0.0.1:80, 10.0.0.2:80, … with
// the given weights.
func servers(weights ...int) []*Server {
	var ss []*Server
	for i, w := range weights {
		ss = append(ss, &Server{Addr: fmt.Sprintf("10.0.0.%d:80", i+1), Weight: w})
	}
	return ss
}

// letter names server 10.0.0.n:80 by the n-th letter, for readable tests.
// Other addresses are returned whole.
func letter(s *Server) string {
	var n int
	if _, err := fmt.Sscanf(s.Addr, "10.0.0.%d:80", &n); err != nil || n < 1 || n > 26 {
		return s.Addr
	}
	return string(rune('a' + n - 1))
}

// testOptions are Options with an injected clock and randomness, and
// passive rules off unless a test turns them on.
func testOptions(c *fakeClock) Options {
	return Options{Now: c.Now, Rand: newRand(1), MaxFails: -1, ConsecutiveFailures: -1}
}

// pickN picks n times with req, reporting each try as a success of 1ms,
// and returns the count per server letter.
func pickN(t *testing.T, g *Group, n int, req Request) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		s, err := g.Pick(req)
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		got[letter(s)]++
		g.Report(s, Result{Status: 200, Duration: time.Millisecond})
	}
	return got
}

func fail(g *Group, s *Server, n int) {
	for range n {
		g.Report(s, Result{Failure: ConnectFailure})
	}
}

func TestSelectionRules(t *testing.T) {
	type server struct {
		weight int
		backup bool
		down   bool // failed its active checks
	}
	tests := []struct {
		name    string
		servers []server
		tried   tried
		want    string // the letters Pick may return, all of which must occur
	}{
		{"all fine", []server{{1, false, false}, {1, false, false}}, nil, "ab"},
		{"failed try is skipped", []server{{1, false, false}, {1, false, false}, {1, false, false}}, tried{"10.0.0.1:80": failed}, "bc"},
		{"single server retries itself", []server{{1, false, false}}, tried{"10.0.0.1:80": failed}, "a"},
		{"all tried: retry among them", []server{{1, false, false}, {1, false, false}}, tried{"10.0.0.1:80": failed, "10.0.0.2:80": failed}, "ab"},
		{"down is skipped", []server{{1, false, true}, {1, false, false}}, nil, "b"},
		{"backup idle while a primary is up", []server{{1, false, false}, {1, true, false}}, nil, "a"},
		{"backup when primaries are down", []server{{1, false, true}, {1, false, true}, {1, true, false}}, nil, "c"},
		{"backup when primaries are tried", []server{{1, false, false}, {1, true, false}}, tried{"10.0.0.1:80": failed}, "b"},
		{"tried primary before tried backup", []server{{1, false, false}, {1, true, false}}, tried{"10.0.0.1:80": failed, "10.0.0.2:80": failed}, "a"},
		{"panic: all down", []server{{1, false, true}, {1, false, true}}, nil, "ab"},
		{"panic prefers untried", []server{{1, false, true}, {1, false, true}}, tried{"10.0.0.1:80": failed}, "b"},
		{"panic uses primaries, not backups", []server{{1, false, true}, {1, true, true}}, nil, "a"},
		{"only backups", []server{{1, true, false}, {1, true, false}}, nil, "ab"},
		{"only backups, all down", []server{{1, true, true}, {1, true, true}}, nil, "ab"},
		{"excluded is never offered", []server{{1, false, false}, {1, false, false}}, tried{"10.0.0.1:80": excluded, "10.0.0.2:80": failed}, "b"},
		{"excluded primary: backup", []server{{1, false, false}, {1, true, false}}, tried{"10.0.0.1:80": excluded}, "b"},
		{"panic skips excluded", []server{{1, false, true}, {1, false, true}}, tried{"10.0.0.1:80": failed, "10.0.0.2:80": excluded}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ss []*Server
			for i, s := range tt.servers {
				x := &Server{Addr: fmt.Sprintf("10.0.0.%d:80", i+1), Weight: s.weight, Backup: s.backup}
				x.activeDown.Store(s.down)
				ss = append(ss, x)
			}
			g := NewGroup("u", ss, new(RoundRobin), testOptions(newClock()))
			req := Request{}
			if tt.tried != nil {
				req.Tries = tt.tried
			}
			got := pickN(t, g, 40, req)
			var letters []string
			for l := range got {
				letters = append(letters, l)
			}
			for _, l := range letters {
				if !strings.Contains(tt.want, l) {
					t.Errorf("picked %s (%v), want only %q", l, got, tt.want)
				}
			}
			for _, l := range tt.want {
				if got[string(l)] == 0 {
					t.Errorf("never picked %c (%v)", l, got)
				}
			}
		})
	}
}

func TestPickFailsWhenEveryServerIsExcluded(t *testing.T) {
	g := NewGroup("u", servers(1, 1), nil, testOptions(newClock()))
	_, err := g.Pick(Request{Tries: tried{"10.0.0.1:80": excluded, "10.0.0.2:80": excluded}})
	if !errors.Is(err, ErrAllExcluded) {
		t.Fatalf("Pick = %v, want ErrAllExcluded", err)
	}
	for _, s := range g.Servers() {
		if s.Outstanding() != 0 {
			t.Fatalf("%s has %d outstanding after a failed Pick", s.Addr, s.Outstanding())
		}
	}
}

func TestEveryPolicyHonoursTheFilters(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			newPolicy, err := ParsePolicy(name)
			if err != nil {
				t.Fatal(err)
			}
			ss := servers(1, 1, 1, 1)
			ss[3].Backup = true
			ss[1].activeDown.Store(true)
			g := NewGroup("u", ss, newPolicy(), testOptions(newClock()))
			req := Request{Tries: tried{"10.0.0.1:80": failed}, HashKey: []byte("k")}
			for i := range 200 {
				req.HashKey = fmt.Appendf(req.HashKey[:0], "key-%d", i)
				s, err := g.Pick(req)
				if err != nil {
					t.Fatal(err)
				}
				if l := letter(s); l != "c" {
					t.Fatalf("picked %s, want c (a tried, b down, d a backup)", l)
				}
				g.Report(s, Result{Status: 200})
			}
		})
	}
}

func TestNoServer(t *testing.T) {
	tests := []struct {
		name    string
		servers []*Server
		reason  string
	}{
		{"empty", nil, "no servers configured"},
		{"name not resolved yet", []*Server{{Name: "app.internal:8080"}}, "no address resolved yet for app.internal:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGroup("u", tt.servers, nil, testOptions(newClock()))
			s, err := g.Pick(Request{})
			if s != nil || !errors.Is(err, ErrNoServer) {
				t.Fatalf("Pick = %v, %v; want ErrNoServer", s, err)
			}
			var ne *NoServerError
			if !errors.As(err, &ne) || ne.Upstream != "u" || ne.Reason != tt.reason {
				t.Fatalf("error %#v, want reason %q", err, tt.reason)
			}
		})
	}
}

func TestPanicModeNeverRefuses(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.MaxFails = 1
	o.ConsecutiveFailures = 1
	o.MaxEjectedPercent = 100
	g := NewGroup("u", servers(1, 1, 1), new(RoundRobin), o)
	for _, s := range g.Servers() {
		fail(g, s, 1)
		if s.Healthy() {
			t.Fatalf("%s still healthy after a failure", s)
		}
	}
	got := pickN(t, g, 30, Request{})
	if len(got) != 3 {
		t.Fatalf("panic mode picked %v, want all three servers", got)
	}
}

func TestOutstandingPairsPickAndReport(t *testing.T) {
	g := NewGroup("u", servers(1), nil, testOptions(newClock()))
	var picked []*Server
	for range 3 {
		s, _ := g.Pick(Request{})
		picked = append(picked, s)
	}
	s := picked[0]
	if n := s.Outstanding(); n != 3 {
		t.Fatalf("outstanding after 3 picks = %d", n)
	}
	g.Report(s, Result{Status: 200})
	g.Report(s, Result{Failure: Canceled})
	g.Report(s, Result{Failure: Timeout})
	g.Report(s, Result{Status: 200}) // one too many: stays at zero
	if n := s.Outstanding(); n != 0 {
		t.Fatalf("outstanding after the reports = %d", n)
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			newPolicy, _ := ParsePolicy(name)
			o := testOptions(newClock())
			o.SlowStart = time.Minute
			g := NewGroup("u", servers(3, 1, 1, 2), newPolicy(), o)
			req := Request{Tries: tried{"10.0.0.2:80": failed}, HashKey: []byte("client-7")}
			pick := func() {
				s, err := g.Pick(req)
				if err != nil {
					t.Fatal(err)
				}
				g.Report(s, Result{Status: 200, Duration: time.Millisecond})
			}
			for range 10 {
				pick() // warm the pool and the round-robin state
			}
			if n := testing.AllocsPerRun(1000, pick); n != 0 {
				t.Fatalf("Pick+Report allocates %v times", n)
			}
		})
	}
}

// goroutinesOf counts the goroutines whose stack runs code of this package
// other than the tests.
func goroutinesOf() (int, string) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "sluice/balance.(*Group)") {
			n++
			found = append(found, g)
		}
	}
	return n, strings.Join(found, "\n\n")
}

func TestConcurrentUse(t *testing.T) {
	dns := &fakeDNS{}
	dns.set(nil, loopback(1, 2, 3)...)
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			newPolicy, _ := ParsePolicy(name)
			o := Options{ // real clock and randomness
				MaxFails: 2, FailTimeout: time.Millisecond,
				ConsecutiveFailures: 3, BaseEjection: time.Millisecond,
				SlowStart: 5 * time.Millisecond,
				Resolver:  dns.Resolve,
			}
			ss := append(servers(1, 2, 3), &Server{Name: "app.internal:80", ResolveInterval: time.Millisecond}, &Server{Addr: "10.0.0.9:80", Backup: true})
			g := NewGroup("u", ss, newPolicy(), o)
			g.Start(context.Background())
			defer g.Close()
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := Request{}
					if w%2 == 0 {
						req.Tries = tried{"10.0.0.1:80": failed}
					}
					for i := range 500 {
						req.HashKey = fmt.Appendf(req.HashKey[:0], "k%d", i)
						s, err := g.Pick(req)
						if err != nil {
							t.Error(err)
							return
						}
						r := Result{Status: 200, Duration: time.Duration(i%7) * time.Millisecond}
						if i%3 == w%3 {
							r = Result{Failure: Timeout, Duration: time.Millisecond}
						}
						g.Report(s, r)
						if i%50 == 0 {
							_ = s.State()
							_ = g.Servers()
						}
					}
				}()
			}
			// The answer changes under the picks, each change looked up
			// before the next.
			for i := range 20 {
				n := dns.lookups()
				dns.set(nil, loopback(1+i%3, 2+i%4)...)
				wait.For(t, "a lookup of the new answer", func() bool { return dns.lookups() > n+1 })
			}
			wg.Wait()
			for _, s := range g.Servers() {
				if n := s.Outstanding(); n != 0 {
					t.Errorf("%s: %d outstanding after every try was reported", s, n)
				}
			}
		})
	}
}
