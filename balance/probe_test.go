package balance

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// outRules are the ways passive health takes a server out with two
// failures, and how its probes then go: when the first is due, and after a
// failed probe how long the server stays out and when the next is due.
var outRules = []struct {
	name  string
	set   func(*Options)
	half  time.Duration // the first probe is due this long after the failures
	again time.Duration // a failed probe holds the server out this long
	next  time.Duration // and the next probe is due this long after it
}{
	{"ejection", func(o *Options) { o.ConsecutiveFailures, o.BaseEjection = 2, 30*time.Second },
		15 * time.Second, 60 * time.Second, 30 * time.Second},
	{"max_fails", func(o *Options) { o.MaxFails, o.FailTimeout = 2, 10*time.Second },
		5 * time.Second, 10 * time.Second, 5 * time.Second},
	// Out by both, still at the probe: it comes at half of the longer, and
	// a failed one starts both over, the next probe again at half of the
	// longer.
	{"both", func(o *Options) {
		o.ConsecutiveFailures, o.BaseEjection = 2, 30*time.Second
		o.MaxFails, o.FailTimeout = 2, 20*time.Second
	}, 15 * time.Second, 60 * time.Second, 30 * time.Second},
}

// hold picks n times with req, reporting none of the tries, and returns
// the servers picked in order.
func hold(t *testing.T, g *Group, n int, req Request) []*Server {
	t.Helper()
	var got []*Server
	for i := range n {
		req.HashKey = fmt.Appendf(req.HashKey[:0], "key-%d", i)
		s, err := g.Pick(req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	return got
}

// count returns how many of ss are s.
func count(ss []*Server, s *Server) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

// succeed reports every try of ss but those on skip as a success.
func succeed(g *Group, ss []*Server, skip *Server) {
	for _, s := range ss {
		if s != skip {
			g.Report(s, Result{Status: 200, Duration: time.Millisecond})
		}
	}
}

// TestProbeAfterHalfTheTime: a server taken out passively gets no try
// until half its time has passed, then exactly one, the first Pick's,
// whatever the policy.
func TestProbeAfterHalfTheTime(t *testing.T) {
	for _, rule := range outRules {
		for _, name := range PolicyNames() {
			t.Run(rule.name+"/"+name, func(t *testing.T) {
				c := newClock()
				o := testOptions(c)
				rule.set(&o)
				newPolicy, _ := ParsePolicy(name)
				g := NewGroup("u", servers(1, 1, 1), newPolicy(), o)
				a := g.Servers()[0]
				fail(g, a, 2)
				if a.Healthy() {
					t.Fatal("two failures left the server in")
				}

				c.Add(rule.half - time.Nanosecond)
				before := hold(t, g, 100, Request{})
				succeed(g, before, nil)
				if n := count(before, a); n != 0 {
					t.Fatalf("picked %d times before half its time", n)
				}

				c.Add(time.Nanosecond)
				got := hold(t, g, 100, Request{})
				if got[0] != a || count(got, a) != 1 {
					t.Fatalf("at half its time: first pick %s, %d picks of a; want the first and only that one", letter(got[0]), count(got, a))
				}
				succeed(g, got, a)
				if a.Outstanding() != 1 || a.Healthy() {
					t.Fatalf("probe in flight: outstanding %d, healthy %v; want 1, false", a.Outstanding(), a.Healthy())
				}
			})
		}
	}
}

func TestConcurrentPicksTakeOneProbe(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.ConsecutiveFailures = 1
	g := NewGroup("u", servers(1, 1, 1), nil, o)
	a := g.Servers()[0]
	fail(g, a, 1)
	for round := range 20 {
		c.Add(time.Duration(a.probe.Load() - c.Now().UnixNano())) // to the probe's time
		const workers, each = 16, 20
		start := make(chan struct{})
		got := make([][]*Server, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range each {
					s, err := g.Pick(Request{})
					if err != nil {
						t.Error(err)
						return
					}
					got[w] = append(got[w], s)
				}
			}()
		}
		close(start)
		wg.Wait()
		n := 0
		for _, ss := range got {
			n += count(ss, a)
			succeed(g, ss, a)
		}
		if n != 1 {
			t.Fatalf("round %d: %d concurrent picks took the probe, want 1", round, n)
		}
		g.Report(a, Result{Failure: ConnectFailure}) // out again, for the next round
		if a.Healthy() {
			t.Fatalf("round %d: a failed probe brought the server back", round)
		}
	}
}

// announcements returns Options that record OnChange calls and log lines.
func announcements(o Options) (Options, *recorder, *bytes.Buffer) {
	var rec recorder
	var logs bytes.Buffer
	o.OnChange = rec.OnChange
	o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	return o, &rec, &logs
}

func TestProbeVerdict(t *testing.T) {
	results := []struct {
		name   string
		result Result
		back   bool
		what   string // the failure, as State names it
	}{
		{"success", Result{Status: 200}, true, ""},
		{"uncounted status", Result{Status: 404}, true, ""},
		{"counted status", Result{Status: 503}, false, "status 503"},
		{"connect failure", Result{Failure: ConnectFailure}, false, "connect failure"},
		{"invalid response", Result{Failure: InvalidResponse}, false, "invalid response"},
		{"slow", Result{Failure: Slow}, false, "slow"},
	}
	for _, rule := range outRules {
		for _, tt := range results {
			t.Run(rule.name+"/"+tt.name, func(t *testing.T) {
				c := newClock()
				o, rec, logs := announcements(testOptions(c))
				rule.set(&o)
				o.SlowStart = 100 * time.Second
				g := NewGroup("u", servers(1, 1, 1), new(RoundRobin), o)
				a := g.Servers()[0]
				fail(g, a, 2)
				c.Add(rule.half)
				if p := hold(t, g, 1, Request{}); p[0] != a {
					t.Fatalf("picked %s, want the probe of a", letter(p[0]))
				}
				c.Add(time.Millisecond) // the probe's try
				g.Report(a, tt.result)

				if tt.back {
					if !a.Healthy() || a.State() != "healthy (slow start, 10% weight)" {
						t.Fatalf("after a successful probe: %s", a.State())
					}
					if got := rec.String(); got != "a=false a=true" {
						t.Fatalf("OnChange calls %q, want a=false a=true", got)
					}
					if !strings.Contains(logs.String(), `to=healthy reason="probe succeeded"`) {
						t.Fatalf("log:\n%s", logs)
					}
					// It comes back now, and ramps up from now.
					c.Add(o.SlowStart / 2)
					if st := a.State(); st != "healthy (slow start, 55% weight)" {
						t.Fatalf("half the slow start after the probe: %s", st)
					}
					c.Add(o.SlowStart / 2)
					if got := pickN(t, g, 30, Request{}); got["a"] != 10 {
						t.Fatalf("picks after the probe: %v, want a in its turn", got)
					}
					return
				}

				// A failure holds the server out longer than before, for
				// the rule's time over again, and says why.
				if st := a.State(); a.Healthy() || !strings.Contains(st, "probe failed: "+tt.what) {
					t.Fatalf("after a failed probe: %s", st)
				}
				if rule.name != "max_fails" && !strings.Contains(a.State(), "ejection 2 for 1m0s") {
					t.Fatalf("a failed probe is the next ejection, once: %s", a.State())
				}
				if got := rec.String(); got != "a=false" {
					t.Fatalf("OnChange calls %q, want a=false alone", got)
				}
				c.Add(rule.next - time.Nanosecond)
				before := hold(t, g, 30, Request{})
				succeed(g, before, nil)
				if count(before, a) != 0 {
					t.Fatal("probed again before half the new time")
				}
				c.Add(time.Nanosecond)
				if p := hold(t, g, 1, Request{}); p[0] != a {
					t.Fatalf("picked %s at half the new time, want the next probe of a", letter(p[0]))
				}
				c.Add(rule.again - rule.next - time.Nanosecond)
				if a.Healthy() {
					t.Fatalf("back before %v after the failed probe", rule.again)
				}
				c.Add(time.Nanosecond)
				if !a.Healthy() {
					t.Fatalf("still out %v after the failed probe: %s", rule.again, a.State())
				}
			})
		}
	}
}

// TestFailedProbesLengthenEjections: each failed probe is one more
// ejection, and counts toward nothing else: not toward max_fails, which
// would take the server down for a long fail_timeout on its third failure.
func TestFailedProbesLengthenEjections(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.ConsecutiveFailures, o.BaseEjection, o.MaxEjection = 2, 30*time.Second, 75*time.Second
	o.MaxFails, o.FailTimeout = 3, 10*time.Minute
	g := NewGroup("u", servers(1, 1, 1), nil, o)
	a := g.Servers()[0]
	fail(g, a, 2)
	for i, d := range []time.Duration{30 * time.Second, 60 * time.Second, 75 * time.Second, 75 * time.Second} {
		if st := a.State(); !strings.Contains(st, fmt.Sprintf("ejection %d for %v", i+1, d)) {
			t.Fatalf("ejection %d: %s, want it for %v", i+1, st, d)
		}
		c.Add(d / 2)
		if p := hold(t, g, 1, Request{}); p[0] != a {
			t.Fatalf("ejection %d: no probe at half", i+1)
		}
		g.Report(a, Result{Failure: ConnectFailure})
	}
	// A success brings it back; the multiplier then decays as after an
	// ejection that ran out.
	c.Add(75 * time.Second / 2)
	if p := hold(t, g, 1, Request{}); p[0] != a {
		t.Fatal("no probe at half the last ejection")
	}
	g.Report(a, Result{Status: 200})
	if !a.Healthy() {
		t.Fatalf("after a successful probe: %s", a.State())
	}
	c.Add(60 * time.Second)
	fail(g, a, 2)
	if st := a.State(); !strings.Contains(st, "ejection 4 for 1m15s") {
		t.Fatalf("after 60s healthy: %s, want the 4th ejection (5, less 2 for 60s, plus this one)", st)
	}
}

func TestCanceledProbeFreesTheSlot(t *testing.T) {
	for _, rule := range outRules {
		t.Run(rule.name, func(t *testing.T) {
			c := newClock()
			o := testOptions(c)
			rule.set(&o)
			g := NewGroup("u", servers(1, 1, 1), nil, o)
			a := g.Servers()[0]
			fail(g, a, 2)
			c.Add(rule.half)
			got := hold(t, g, 10, Request{})
			if count(got, a) != 1 {
				t.Fatalf("%d probes, want 1", count(got, a))
			}
			succeed(g, got, a)
			g.Report(a, Result{Failure: Canceled})
			if a.Healthy() || a.Outstanding() != 0 {
				t.Fatalf("after a canceled probe: %s, %d outstanding", a.State(), a.Outstanding())
			}
			if p := hold(t, g, 1, Request{}); p[0] != a {
				t.Fatalf("picked %s after a canceled probe, want a new probe of a", letter(p[0]))
			}
			g.Report(a, Result{Status: 200})
			if !a.Healthy() {
				t.Fatalf("the probe after a canceled one gave no verdict: %s", a.State())
			}
		})
	}
}

func TestNoProbe(t *testing.T) {
	for _, rule := range outRules {
		t.Run(rule.name, func(t *testing.T) {
			c := newClock()
			o := testOptions(c)
			rule.set(&o)
			o.NoProbe = true
			g := NewGroup("u", servers(1, 1, 1), nil, o)
			a := g.Servers()[0]
			fail(g, a, 2)
			c.Add(rule.half)
			if picks(t, g, a, 100) {
				t.Fatal("probed with NoProbe")
			}
		})
	}
}

// TestProbeRespectsTheRequest: a request that already tried the server,
// or must not go there, does not take its probe; the next one does.
func TestProbeRespectsTheRequest(t *testing.T) {
	for _, tr := range []tried{{"10.0.0.1:80": failed}, {"10.0.0.1:80": excluded}} {
		c := newClock()
		o := testOptions(c)
		o.ConsecutiveFailures = 2
		g := NewGroup("u", servers(1, 1, 1), nil, o)
		a := g.Servers()[0]
		fail(g, a, 2)
		c.Add(DefaultBaseEjection / 2)
		got := hold(t, g, 20, Request{Tries: tr})
		succeed(g, got, nil)
		if count(got, a) != 0 {
			t.Fatalf("%v: a request that tried a took its probe", tr)
		}
		if p := hold(t, g, 1, Request{}); p[0] != a {
			t.Fatalf("picked %s, want the probe of a", letter(p[0]))
		}
	}
}

// TestProbeWaitsForTriesInFlight: a try still in flight from before the
// ejection is not the probe, and the probe waits for it.
func TestProbeWaitsForTriesInFlight(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.ConsecutiveFailures = 2
	g := NewGroup("u", servers(1, 1, 1), new(First), o)
	a := g.Servers()[0]
	hold(t, g, 3, Request{}) // First: all three on a
	fail(g, a, 2)            // ejected, one try still out
	c.Add(DefaultBaseEjection / 2)
	got := hold(t, g, 20, Request{})
	succeed(g, got, nil)
	if count(got, a) != 0 {
		t.Fatal("probed while an older try was in flight")
	}
	g.Report(a, Result{Status: 200}) // the older try: not a verdict
	if a.Healthy() {
		t.Fatal("a try picked before the ejection ended it")
	}
	if p := hold(t, g, 1, Request{}); p[0] != a {
		t.Fatalf("picked %s once no try was in flight, want the probe of a", letter(p[0]))
	}
}

// TestProbeOutlivedByItsTime: a probe still in flight when the server's
// time runs out is an ordinary try.
func TestProbeOutlivedByItsTime(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.ConsecutiveFailures = 2
	g := NewGroup("u", servers(1, 1, 1), nil, o)
	a := g.Servers()[0]
	fail(g, a, 2)
	c.Add(DefaultBaseEjection / 2)
	if p := hold(t, g, 1, Request{}); p[0] != a {
		t.Fatal("no probe")
	}
	c.Add(DefaultBaseEjection)
	g.Report(a, Result{Failure: ConnectFailure})
	if !a.Healthy() {
		t.Fatalf("one failure after the ejection ran out: %s", a.State())
	}
	fail(g, a, 1) // the second in a row: ejected, as the next ejection
	if st := a.State(); !strings.Contains(st, "2 consecutive failures, last: connect failure; ejection 2") {
		t.Fatalf("State = %s", st)
	}
}

func TestProbeAndTiers(t *testing.T) {
	tests := []struct {
		name    string
		backups string // letters of the backups among a, b, c at 10.0.0.1, 2, 3
		out     string // the letter of the server taken out
		down    string // letters of servers failing their active checks
		probe   bool   // whether out is probed at half its ejection
	}{
		{"primary with a backup serving", "b", "a", "", true},
		{"backup while a primary serves", "bc", "b", "", false},
		{"backup while backups serve", "bc", "b", "a", true},
		{"failing its active checks too", "", "a", "a", false},
		{"panic mode", "", "a", "bc", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			o := testOptions(c)
			o.ConsecutiveFailures, o.MaxEjectedPercent = 1, 100
			ss := servers(1, 1, 1)
			for _, s := range ss {
				s.Backup = strings.Contains(tt.backups, letter(s))
			}
			g := NewGroup("u", ss, new(RoundRobin), o)
			var out *Server
			for _, s := range g.Servers() {
				if letter(s) == tt.out {
					out = s
					fail(g, s, 1)
				}
				if strings.Contains(tt.down, letter(s)) {
					s.activeDown.Store(true)
				}
			}
			c.Add(DefaultBaseEjection / 2)
			got := hold(t, g, 20, Request{})
			probed := got[0] == out && out.probe.Load() < 0
			if n := count(got, out); probed != tt.probe || !tt.probe && n != 0 {
				t.Fatalf("%d picks of %s (first %s), want a probe: %v", n, tt.out, letter(got[0]), tt.probe)
			}
		})
	}
}

// TestProbeInPanicMode: with every server ejected, Picks go on to all of
// them, probes or not; a successful try takes its server out of the panic.
func TestProbeInPanicMode(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.ConsecutiveFailures, o.MaxEjectedPercent = 1, 100
	g := NewGroup("u", servers(1, 1), new(RoundRobin), o)
	a, b := g.Servers()[0], g.Servers()[1]
	fail(g, a, 1)
	fail(g, b, 1)
	if got := pickN(t, g, 10, Request{}); got["a"] != 5 || got["b"] != 5 {
		t.Fatalf("panic mode before the probes: %v", got)
	}
	c.Add(DefaultBaseEjection / 2)
	got := hold(t, g, 10, Request{})
	if got[0] != a || got[1] != b || count(got, a) != 5 || count(got, b) != 5 {
		t.Fatalf("picks at half the ejections: %v, want the probes of a and b first, then panic mode", got)
	}
	// a's first report is taken for its probe.
	g.Report(a, Result{Status: 200})
	if !a.Healthy() || b.Healthy() {
		t.Fatalf("a %s, b %s", a.State(), b.State())
	}
	if got := pickN(t, g, 10, Request{}); got["a"] != 10 {
		t.Fatalf("picks once a is back: %v, want all on a", got)
	}
}

func TestCarriedProbe(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.ConsecutiveFailures = 2
	old := NewGroup("u", servers(1, 1, 1), nil, o)
	fail(old, old.Servers()[0], 2)
	c.Add(DefaultBaseEjection / 2)
	if p := hold(t, old, 1, Request{}); p[0] != old.Servers()[0] {
		t.Fatal("no probe in the old generation")
	}
	g := NewGroup("u", servers(1, 1, 1), nil, o)
	g.Carry(old)
	a := g.Servers()[0]
	if p := hold(t, g, 1, Request{}); p[0] != a {
		t.Fatalf("picked %s, want the carried server's probe", letter(p[0]))
	}
	g.Report(a, Result{Status: 200})
	if !a.Healthy() {
		t.Fatalf("after the new generation's probe: %s", a.State())
	}
}
