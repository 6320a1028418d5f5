package balance

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestDistribution(t *testing.T) {
	const n = 10000
	tests := []struct {
		policy  string
		weights []int
		keys    bool      // give each request a distinct hash key
		want    []float64 // expected share per server
		tol     float64   // allowed absolute error per share
	}{
		// Smooth WRR and least-request on an idle group are exact.
		{"round_robin", []int{3, 1, 1}, false, []float64{.6, .2, .2}, 0},
		{"round_robin", []int{1, 1, 1, 1}, false, []float64{.25, .25, .25, .25}, 0},
		{"least_request", []int{3, 1, 1}, false, []float64{.6, .2, .2}, 0},
		{"random", []int{3, 1, 1}, false, []float64{.6, .2, .2}, .03},
		{"random", []int{1, 1}, false, []float64{.5, .5}, .03},
		// P2C with equal latency: equal weights give uniform picks; a
		// heavier server wins every pair it is in (2/3 of the pairs here).
		{"p2c", []int{1, 1, 1}, false, []float64{1. / 3, 1. / 3, 1. / 3}, .03},
		{"p2c", []int{3, 1, 1}, false, []float64{2. / 3, 1. / 6, 1. / 6}, .03},
		{"first", []int{1, 5, 5}, false, []float64{1, 0, 0}, 0},
		// Hashing distinct keys: ring points are 160 per weight unit.
		{"hash", []int{1, 1, 1, 1, 1}, true, []float64{.2, .2, .2, .2, .2}, .05},
		{"hash", []int{3, 1, 1}, true, []float64{.6, .2, .2}, .05},
		{"hash", []int{3, 1, 1}, false, []float64{.6, .2, .2}, 0}, // no key: round robin
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%v/keys=%v", tt.policy, tt.weights, tt.keys), func(t *testing.T) {
			newPolicy, err := ParsePolicy(tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			g := NewGroup("u", servers(tt.weights...), newPolicy(), testOptions(newClock()))
			got := map[string]int{}
			var req Request
			for i := range n {
				if tt.keys {
					req.HashKey = fmt.Appendf(req.HashKey[:0], "client-%d", i)
				}
				s, err := g.Pick(req)
				if err != nil {
					t.Fatal(err)
				}
				got[letter(s)]++
				g.Report(s, Result{Status: 200, Duration: 10 * time.Millisecond})
			}
			for i, w := range tt.want {
				l := string(rune('a' + i))
				share := float64(got[l]) / n
				if math.Abs(share-w) > tt.tol+1e-9 {
					t.Errorf("server %s: share %.4f, want %.4f ± %.2f (all: %v)", l, share, w, tt.tol, got)
				}
			}
		})
	}
}

func TestSmoothWeightedRoundRobinSequence(t *testing.T) {
	tests := []struct {
		weights []int
		want    string
	}{
		{[]int{5, 1, 1}, "aabacaa" + "aabacaa"}, // nginx's example
		{[]int{1, 1, 1}, "abcabc"},
		{[]int{2, 1}, "aba" + "aba"},
		{[]int{4, 2, 1}, "abacaba"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.weights), func(t *testing.T) {
			g := NewGroup("u", servers(tt.weights...), new(RoundRobin), testOptions(newClock()))
			var b strings.Builder
			for range len(tt.want) {
				s, _ := g.Pick(Request{})
				b.WriteString(letter(s))
				g.Report(s, Result{Status: 200})
			}
			if got := b.String(); got != tt.want {
				t.Fatalf("sequence %s, want %s", got, tt.want)
			}
		})
	}
}

// candidates builds Candidates over ss at full weight.
func candidates(ss []*Server, now time.Time) *Candidates {
	c := &Candidates{Now: now, Rand: newRand(7)}
	for _, s := range ss {
		c.add(s, int64(s.weight())*weightScale)
	}
	return c
}

func TestLeastRequestPrefersLessLoaded(t *testing.T) {
	tests := []struct {
		name        string
		weights     []int
		outstanding []int64
		want        string
	}{
		{"fewest", []int{1, 1, 1}, []int64{5, 1, 3}, "b"},
		{"per weight", []int{4, 1}, []int64{4, 2}, "a"},
		{"per weight, other way", []int{4, 1}, []int64{9, 2}, "b"},
		{"idle goes first", []int{1, 1, 1}, []int64{2, 2, 0}, "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ss := servers(tt.weights...)
			for i, o := range tt.outstanding {
				ss[i].outstanding.Store(o)
			}
			var p LeastRequest
			for range 10 {
				if got := letter(p.Pick(candidates(ss, time.Time{}), Request{})); got != tt.want {
					t.Fatalf("picked %s, want %s", got, tt.want)
				}
			}
		})
	}
}

func TestP2CPrefersFasterAndLessLoaded(t *testing.T) {
	now := newClock().Now()
	tests := []struct {
		name        string
		latency     []time.Duration // 0: no report yet
		outstanding []int64
		weights     []int
		want        string
	}{
		{"faster", []time.Duration{10 * time.Millisecond, 100 * time.Millisecond}, []int64{0, 0}, []int{1, 1}, "a"},
		{"faster, other way", []time.Duration{100 * time.Millisecond, 10 * time.Millisecond}, []int64{0, 0}, []int{1, 1}, "b"},
		{"less loaded", []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, []int64{4, 1}, []int{1, 1}, "b"},
		{"fast but overloaded", []time.Duration{10 * time.Millisecond, 100 * time.Millisecond}, []int64{20, 0}, []int{1, 1}, "b"},
		{"heavier", []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, []int64{2, 1}, []int{4, 1}, "a"},
		{"unknown and idle is probed", []time.Duration{0, 10 * time.Millisecond}, []int64{0, 0}, []int{1, 1}, "a"},
		{"unknown and busy waits", []time.Duration{0, 10 * time.Millisecond}, []int64{1, 3}, []int{1, 1}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ss := servers(tt.weights...)
			for i, s := range ss {
				s.outstanding.Store(tt.outstanding[i])
				if tt.latency[i] > 0 {
					s.observe(now.UnixNano(), tt.latency[i])
				}
			}
			var p P2C
			c := candidates(ss, now)
			for range 20 { // two servers: every draw is the same pair
				if got := letter(p.Pick(c, Request{})); got != tt.want {
					t.Fatalf("picked %s, want %s", got, tt.want)
				}
			}
		})
	}
}

func TestLatencyEstimate(t *testing.T) {
	c := newClock()
	g := NewGroup("u", servers(1), nil, testOptions(c))
	s := g.Servers()[0]
	ms := time.Millisecond
	steps := []struct {
		advance time.Duration
		report  time.Duration // 0: none
		want    time.Duration
	}{
		{0, 10 * ms, 10 * ms},
		{0, 50 * ms, 50 * ms}, // a slower sample takes over at once
		{0, 10 * ms, 40 * ms}, // a faster one moves it a quarter of the way
		{10 * time.Second, 0, time.Duration(float64(40*ms) / math.E)}, // idle: decays with a 10s time constant
		{0, 40 * ms, 40 * ms}, // above the decayed estimate: takes over
	}
	for i, st := range steps {
		c.Add(st.advance)
		if st.report > 0 {
			g.Report(s, Result{Status: 200, Duration: st.report})
		}
		if got := s.Latency(); (got - st.want).Abs() > time.Microsecond {
			t.Fatalf("step %d: latency %v, want %v", i, got, st.want)
		}
	}
	// Connect failures give no sample.
	g.Report(s, Result{Failure: ConnectFailure, Duration: time.Hour})
	if got := s.Latency(); got > 50*ms {
		t.Fatalf("a connect failure moved the latency to %v", got)
	}
}

func TestParsePolicy(t *testing.T) {
	for _, name := range []string{"round_robin", "least_request", "p2c", "random", "first", "hash"} {
		f, err := ParsePolicy(name)
		if err != nil || f() == nil {
			t.Errorf("ParsePolicy(%q) = %v", name, err)
		}
	}
	// A constructor gives each group a fresh policy.
	f, _ := ParsePolicy("round_robin")
	if f() == f() {
		t.Error("round_robin constructor returned a shared policy")
	}
	for _, name := range []string{"", "roundrobin", "P2C", "least_conn"} {
		if _, err := ParsePolicy(name); !errors.Is(err, ErrUnknownPolicy) {
			t.Errorf("ParsePolicy(%q) error = %v, want ErrUnknownPolicy", name, err)
		}
	}
	if _, ok := policies[DefaultPolicy]; !ok {
		t.Errorf("DefaultPolicy %q is not a policy", DefaultPolicy)
	}
}
