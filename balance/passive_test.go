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

// picks reports whether any of n picks of g returned s.
func picks(t *testing.T, g *Group, s *Server, n int) bool {
	t.Helper()
	for range n {
		got, err := g.Pick(Request{})
		if err != nil {
			t.Fatal(err)
		}
		g.Report(got, Result{Failure: Canceled})
		if got == s {
			return true
		}
	}
	return false
}

func TestMaxFailsWithinFailTimeout(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.MaxFails, o.FailTimeout = 3, 10*time.Second
	o.NoProbe = true // the whole fail_timeout, as nginx; probes are TestProbe's
	g := NewGroup("u", servers(1, 1, 1), new(RoundRobin), o)
	a := g.Servers()[0]

	fail(g, a, 2)
	if !picks(t, g, a, 10) {
		t.Fatal("skipped after 2 of 3 failures")
	}
	fail(g, a, 1)
	c.Add(time.Second)
	if picks(t, g, a, 100) {
		t.Fatal("picked while down")
	}
	if st := a.State(); !strings.HasPrefix(st, "down until 2026-01-02T03:04:15Z (3 failures within 10s") {
		t.Fatalf("State = %q", st)
	}
	if h := a.Health(); h.Condition != Down || !h.Until.Equal(time.Date(2026, 1, 2, 3, 4, 15, 0, time.UTC)) ||
		!strings.HasPrefix(h.Reason, "3 failures within 10s") {
		t.Fatalf("Health = %+v", h)
	}
	c.Add(8 * time.Second) // 9s after going down
	if picks(t, g, a, 100) {
		t.Fatal("picked before fail_timeout passed")
	}
	c.Add(time.Second)
	if !picks(t, g, a, 10) {
		t.Fatal("still skipped after fail_timeout")
	}
}

func TestMaxFailsCounting(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int
		results  []Result
		gaps     time.Duration // clock advance before each result
		down     bool
	}{
		{"connect failures", nil, []Result{{Failure: ConnectFailure}, {Failure: ConnectFailure}}, 0, true},
		{"timeouts and invalid", nil, []Result{{Failure: Timeout}, {Failure: InvalidResponse}}, 0, true},
		{"default statuses", nil, []Result{{Status: 502}, {Status: 504}}, 0, true},
		{"500 is not a failure by default", nil, []Result{{Status: 500}, {Status: 500}}, 0, false},
		{"listed 500", []int{500}, []Result{{Status: 500}, {Status: 500}}, 0, true},
		{"empty list counts no status", []int{}, []Result{{Status: 502}, {Status: 503}}, 0, false},
		{"success resets", nil, []Result{{Failure: Timeout}, {Status: 200}, {Failure: Timeout}}, 0, false},
		{"canceled is neutral", nil, []Result{{Failure: Timeout}, {Failure: Canceled}, {Failure: Timeout}}, 0, true},
		{"404 is a response", nil, []Result{{Failure: Timeout}, {Status: 404}, {Failure: Timeout}}, 0, false},
		{"failures outside the window", nil, []Result{{Failure: Timeout}, {Failure: Timeout}}, 11 * time.Second, false},
		{"failures inside the window", nil, []Result{{Failure: Timeout}, {Failure: Timeout}}, 9 * time.Second, true},
		{"slow answers do not count", nil, []Result{{Failure: Slow}, {Failure: Slow}, {Failure: Slow}}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			o := testOptions(c)
			o.MaxFails, o.FailTimeout, o.Statuses = 2, 10*time.Second, tt.statuses
			g := NewGroup("u", servers(1, 1), nil, o)
			a := g.Servers()[0]
			for _, r := range tt.results {
				c.Add(tt.gaps)
				g.Report(a, r)
			}
			if down := !a.Healthy(); down != tt.down {
				t.Fatalf("down = %v, want %v (%s)", down, tt.down, a.State())
			}
		})
	}
}

// A server that times out on everything is ejected by consecutive slow
// tries; one that answers other requests between them is not.
func TestSlowTriesEjectOnlyAHungServer(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.ConsecutiveFailures = 3
	g := NewGroup("u", servers(1, 1), nil, o)
	a, b := g.Servers()[0], g.Servers()[1]
	for range 10 {
		g.Report(a, Result{Failure: Slow, Duration: time.Minute})
		g.Report(a, Result{Status: 200, Duration: time.Millisecond})
	}
	if !a.Healthy() {
		t.Fatalf("a server with one slow endpoint was taken out: %s", a.State())
	}
	for range 3 {
		g.Report(b, Result{Failure: Slow, Duration: time.Minute})
	}
	if b.Healthy() {
		t.Fatal("a server that answered nothing in time is still in")
	}
}

func TestConsecutiveFailureEjection(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.ConsecutiveFailures, o.BaseEjection, o.MaxEjection = 2, 30*time.Second, 75*time.Second
	o.NoProbe = true // whole ejections; probes are TestProbe's
	g := NewGroup("u", servers(1, 1, 1, 1), nil, o)
	a := g.Servers()[0]

	// Each ejection lasts BaseEjection × its number, capped at MaxEjection.
	for i, d := range []time.Duration{30 * time.Second, 60 * time.Second, 75 * time.Second, 75 * time.Second} {
		fail(g, a, 1)
		if !a.Healthy() {
			t.Fatalf("ejection %d: ejected after one failure", i+1)
		}
		fail(g, a, 1)
		if a.Healthy() {
			t.Fatalf("ejection %d: not ejected after two failures", i+1)
		}
		if st := a.State(); !strings.Contains(st, fmt.Sprintf("ejection %d for %v", i+1, d)) {
			t.Fatalf("ejection %d: State = %q, want it for %v", i+1, st, d)
		}
		if h := a.Health(); h.Condition != Ejected || !h.Until.Equal(c.Now().Add(d)) {
			t.Fatalf("ejection %d: Health = %+v, want ejected until %v from now", i+1, h, d)
		}
		c.Add(d - time.Nanosecond)
		if a.Healthy() || picks(t, g, a, 50) {
			t.Fatalf("ejection %d: back before %v", i+1, d)
		}
		c.Add(time.Nanosecond)
		if !a.Healthy() || !picks(t, g, a, 50) {
			t.Fatalf("ejection %d: not back after %v", i+1, d)
		}
		if h := a.Health(); h.Condition == Ejected || h.Condition == Down || !h.Until.IsZero() {
			t.Fatalf("ejection %d: back, Health = %+v", i+1, h)
		}
	}

	// Time spent healthy brings the multiplier down, one step per
	// BaseEjection: after 2×30s the 5th ejection is the 2nd again.
	c.Add(60 * time.Second)
	fail(g, a, 2)
	if st := a.State(); !strings.Contains(st, "ejection 3 for 1m15s") {
		t.Fatalf("after 60s healthy: State = %q", st)
	}
	c.Add(75*time.Second + 10*time.Minute)
	fail(g, a, 2)
	if st := a.State(); !strings.Contains(st, "ejection 1 for 30s") {
		t.Fatalf("after a long healthy spell: State = %q", st)
	}
}

func TestSuccessBreaksConsecutiveFailures(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.ConsecutiveFailures = 3
	g := NewGroup("u", servers(1, 1), nil, o)
	a := g.Servers()[0]
	for range 5 {
		fail(g, a, 2)
		g.Report(a, Result{Status: 200})
	}
	if !a.Healthy() {
		t.Fatalf("ejected without 3 failures in a row: %s", a.State())
	}
}

func TestMaxEjectedPercent(t *testing.T) {
	tests := []struct {
		servers, percent, wantEjected int
	}{
		{3, 50, 1},
		{4, 50, 2},
		{2, 50, 1},
		{1, 50, 0},
		{10, 10, 1},
		{3, 100, 3},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d servers at %d%%", tt.servers, tt.percent), func(t *testing.T) {
			c := newClock()
			o := testOptions(c)
			o.ConsecutiveFailures, o.MaxEjectedPercent = 1, tt.percent
			ws := make([]int, tt.servers)
			g := NewGroup("u", servers(ws...), nil, o)
			// Every server fails, over and over.
			for range 3 {
				for _, s := range g.Servers() {
					fail(g, s, 2)
				}
			}
			ejected := 0
			for _, s := range g.Servers() {
				if !s.Healthy() {
					ejected++
				}
			}
			if ejected != tt.wantEjected {
				t.Fatalf("%d ejected, want %d", ejected, tt.wantEjected)
			}
		})
	}
}

// recorder collects OnChange calls.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) OnChange(s *Server, healthy bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s=%v", letter(s), healthy))
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.events, " ")
}

func TestHealthChangesAreAnnouncedOnce(t *testing.T) {
	c := newClock()
	var rec recorder
	var logs bytes.Buffer
	o := testOptions(c)
	o.MaxFails, o.FailTimeout = 1, 10*time.Second
	o.OnChange = rec.OnChange
	o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	g := NewGroup("api", servers(1, 1), nil, o)
	a := g.Servers()[0]

	fail(g, a, 1)
	g.Report(a, Result{Failure: Timeout}) // while down: not counted, no news
	c.Add(10 * time.Second)
	picks(t, g, a, 20) // notices the return
	picks(t, g, a, 20)
	if got, want := rec.String(), "a=false a=true"; got != want {
		t.Fatalf("OnChange calls %q, want %q", got, want)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	want := []string{
		`level=WARN msg="upstream server health changed" upstream=api server=10.0.0.1:80 name=10.0.0.1:80 from=healthy to=unhealthy reason="1 failures within 10s, last: connect failure"`,
		`level=INFO msg="upstream server health changed" upstream=api server=10.0.0.1:80 name=10.0.0.1:80 from=unhealthy to=healthy reason="down time over"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s", logs.String())
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("log line %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
}

func TestSlowStartRamp(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.MaxFails, o.FailTimeout = 1, 10*time.Second
	o.SlowStart = 100 * time.Second
	g := NewGroup("u", servers(1, 1), new(RoundRobin), o)
	b := g.Servers()[1]

	share := func() float64 {
		const n = 2000
		return float64(pickN(t, g, n, Request{})["b"]) / n
	}
	if s := share(); s != 0.5 {
		t.Fatalf("share before any failure %.3f: servers configured at start do not slow-start", s)
	}
	fail(g, b, 1)
	c.Add(10 * time.Second) // b is back, at 10% weight
	var shares []float64
	for _, st := range []struct {
		advance time.Duration
		state   string
	}{
		{0, "healthy (slow start, 10% weight)"},
		{50 * time.Second, "healthy (slow start, 55% weight)"},
		{50 * time.Second, "healthy"},
	} {
		c.Add(st.advance)
		if got := b.State(); got != st.state {
			t.Errorf("State = %q, want %q", got, st.state)
		}
		shares = append(shares, share())
	}
	// Effective weights 0.1, 0.55, 1 against 1: shares 1/11, 0.55/1.55, 1/2.
	want := []float64{1. / 11, .55 / 1.55, .5}
	for i := range shares {
		if d := shares[i] - want[i]; d > .01 || d < -.01 {
			t.Errorf("share %d = %.3f, want %.3f", i, shares[i], want[i])
		}
		if i > 0 && shares[i] <= shares[i-1] {
			t.Errorf("share did not grow: %v", shares)
		}
	}
}

func TestSlowStartAppliesToEveryWeightedPolicy(t *testing.T) {
	for _, name := range []string{"round_robin", "least_request", "random", "p2c"} {
		t.Run(name, func(t *testing.T) {
			c := newClock()
			o := testOptions(c)
			o.SlowStart = 100 * time.Second
			newPolicy, _ := ParsePolicy(name)
			g := NewGroup("u", servers(1, 1), newPolicy(), o)
			b := g.Servers()[1]
			b.rampFrom.Store(c.Now().UnixNano()) // b just came back
			early := pickN(t, g, 4000, Request{})["b"]
			c.Add(100 * time.Second)
			late := pickN(t, g, 4000, Request{})["b"]
			if early >= late || late < 1600 {
				t.Fatalf("b got %d picks at the start of slow start and %d at the end", early, late)
			}
		})
	}
}

// A Result's End is the time Report takes the try to have ended at, on a
// group with the default clock (Health's Until counts from it); a group
// given its own clock reads that one instead.
func TestReportEnd(t *testing.T) {
	end := time.Now().Add(time.Hour).Round(0) // a time no clock reads now
	for _, tc := range []struct {
		name      string
		own       *fakeClock
		wantUntil func(*fakeClock) time.Time
	}{
		{"default clock", nil, func(*fakeClock) time.Time { return end.Add(10 * time.Second) }},
		{"own clock", newClock(), func(c *fakeClock) time.Time { return c.Now().Add(10 * time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{MaxFails: 1, FailTimeout: 10 * time.Second, ConsecutiveFailures: -1, NoProbe: true}
			if tc.own != nil {
				o.Now = tc.own.Now
			}
			g := NewGroup("u", servers(1), new(RoundRobin), o)
			a := g.Servers()[0]
			got, err := g.Pick(Request{})
			if err != nil {
				t.Fatal(err)
			}
			g.Report(got, Result{Failure: ConnectFailure, End: end})
			if h := a.Health(); h.Condition != Down || !h.Until.Equal(tc.wantUntil(tc.own)) {
				t.Fatalf("Health = %+v, want down until %v", h, tc.wantUntil(tc.own))
			}
		})
	}
}
