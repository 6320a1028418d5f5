package ratelimit

import (
	"strconv"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in       string
		want     Rate
		interval time.Duration
		err      bool
	}{
		{"100/s", Rate{100, time.Second}, 10 * time.Millisecond, false},
		{"6000/m", Rate{6000, time.Minute}, 10 * time.Millisecond, false},
		{"10/h", Rate{10, time.Hour}, 6 * time.Minute, false},
		{"1/s", Rate{1, time.Second}, time.Second, false},
		{"3/s", Rate{3, time.Second}, 333333333 * time.Nanosecond, false},
		{"1000000/s", Rate{1000000, time.Second}, time.Microsecond, false},
		{"1000001/s", Rate{}, 0, true},
		{"0/s", Rate{}, 0, true},
		{"-1/s", Rate{}, 0, true},
		{"+1/s", Rate{}, 0, true},
		{"100", Rate{}, 0, true},
		{"100/", Rate{}, 0, true},
		{"/s", Rate{}, 0, true},
		{"100/d", Rate{}, 0, true},
		{"100/S", Rate{}, 0, true},
		{"100 /s", Rate{}, 0, true},
		{"1.5/s", Rate{}, 0, true},
		{"99999999999999999999/s", Rate{}, 0, true},
		{"", Rate{}, 0, true},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
			continue
		}
		if err == nil {
			if got.String() != tt.in {
				t.Errorf("ParseRate(%q).String() = %q", tt.in, got.String())
			}
			if iv := got.Interval(); iv != tt.interval {
				t.Errorf("ParseRate(%q).Interval() = %v, want %v", tt.in, iv, tt.interval)
			}
		}
	}
}

// fakeClock is the time given to a Local store, moved by hand.
type fakeClock struct{ now int64 }

func (c *fakeClock) time() time.Time { return time.Unix(0, c.now) }

func newFakeLocal(maxKeys int) (*Local, *fakeClock) {
	l := NewLocal(maxKeys)
	l.epoch = time.Unix(0, 0)
	return l, &fakeClock{now: int64(time.Hour)}
}

// TestLocalGCRA walks one key through a script of requests at given
// times and checks each decision: the burst, then the steady rate, the
// Retry-After of requests over it, and the budget filling up again.
func TestLocalGCRA(t *testing.T) {
	ms := time.Millisecond
	type step struct {
		at         time.Duration // since the start
		allowed    bool
		remaining  int64
		retryAfter time.Duration
		reset      time.Duration
	}
	tests := []struct {
		name   string
		policy Policy
		steps  []step
	}{
		{"burst 3 at 10/s", Policy{Rate{10, time.Second}, 3}, []step{
			{0, true, 2, 0, 100 * ms},
			{0, true, 1, 0, 200 * ms},
			{0, true, 0, 0, 300 * ms},
			{0, false, 0, 100 * ms, 300 * ms},
			{50 * ms, false, 0, 50 * ms, 250 * ms},
			{100 * ms, true, 0, 0, 300 * ms},
			{100 * ms, false, 0, 100 * ms, 300 * ms},
			{250 * ms, true, 0, 0, 250 * ms}, // 150ms idle gave one and a half back
			{time.Second, true, 2, 0, 100 * ms},
		}},
		{"burst 1 spaces requests", Policy{Rate{1, time.Second}, 1}, []step{
			{0, true, 0, 0, time.Second},
			{999 * ms, false, 0, 1 * ms, 1 * ms},
			{time.Second, true, 0, 0, time.Second},
			{1500 * ms, false, 0, 500 * ms, 500 * ms},
			{5 * time.Second, true, 0, 0, time.Second},
		}},
		{"6000/m is 100/s", Policy{Rate{6000, time.Minute}, 2}, []step{
			{0, true, 1, 0, 10 * ms},
			{0, true, 0, 0, 20 * ms},
			{0, false, 0, 10 * ms, 20 * ms},
			{10 * ms, true, 0, 0, 20 * ms},
		}},
		{"burst 0 counts as 1", Policy{Rate{2, time.Second}, 0}, []step{
			{0, true, 0, 0, 500 * ms},
			{0, false, 0, 500 * ms, 500 * ms},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, c := newFakeLocal(0)
			start := c.now
			for i, s := range tt.steps {
				c.now = start + int64(s.at)
				d, err := l.Take([]byte("k"), tt.policy, c.time())
				want := Decision{Allowed: s.allowed, Remaining: s.remaining, RetryAfter: s.retryAfter, Reset: s.reset}
				if err != nil || d != want {
					t.Errorf("step %d at %v: %+v, %v; want %+v", i, s.at, d, err, want)
				}
			}
		})
	}
}

// TestLocalSteadyRate sends requests far faster than the rate for ten
// simulated seconds: exactly the burst plus the rate times the time are
// allowed.
func TestLocalSteadyRate(t *testing.T) {
	tests := []struct {
		rate  Rate
		burst int64
		step  time.Duration
	}{
		{Rate{100, time.Second}, 200, time.Millisecond / 3},
		{Rate{7, time.Second}, 1, time.Millisecond},
		{Rate{600, time.Minute}, 5, time.Millisecond},
	}
	for _, tt := range tests {
		l, c := newFakeLocal(0)
		p := Policy{tt.rate, tt.burst}
		run := 10 * time.Second
		allowed := int64(0)
		for at := time.Duration(0); at < run; at += tt.step {
			c.now = int64(time.Hour + at)
			if d, _ := l.Take([]byte("k"), p, c.time()); d.Allowed {
				allowed++
			}
		}
		// Requests at 0 (the burst) and one per interval after it, up to
		// but not including the run's end.
		want := tt.burst + int64((run-time.Nanosecond)/tt.rate.Interval())
		if allowed < want-1 || allowed > want {
			t.Errorf("%v burst %d: %d allowed in %v, want %d", tt.rate, tt.burst, allowed, run, want)
		}
	}
}

// TestLocalKeysApart checks that keys have budgets of their own.
func TestLocalKeysApart(t *testing.T) {
	l, c := newFakeLocal(0)
	p := Policy{Rate{1, time.Second}, 1}
	for _, k := range []string{"10.0.0.1", "10.0.0.2", ""} {
		if d, _ := l.Take([]byte(k), p, c.time()); !d.Allowed {
			t.Errorf("key %q: first request refused", k)
		}
		if d, _ := l.Take([]byte(k), p, c.time()); d.Allowed {
			t.Errorf("key %q: second request allowed", k)
		}
	}
}

// TestLocalBounded floods a small store with distinct keys: it never holds
// more than its bound, stale keys go first, and a key it keeps keeps its
// state.
func TestLocalBounded(t *testing.T) {
	const max = 640
	l, c := newFakeLocal(max)
	p := Policy{Rate{1, time.Minute}, 1}
	// A limited key, then a flood of others, each spent.
	if d, _ := l.Take([]byte("held"), p, c.time()); !d.Allowed {
		t.Fatal("first request refused")
	}
	for i := range 100 * max {
		c.now += int64(time.Microsecond)
		l.Take([]byte(strconv.Itoa(i)), p, c.time())
		if i%97 == 0 && l.Len() > max {
			t.Fatalf("after %d keys the store holds %d, more than %d", i+1, l.Len(), max)
		}
	}
	// A minute on, every key is stale: new keys replace stale ones and
	// the store stays full but bounded.
	c.now += int64(2 * time.Minute)
	for i := range max {
		l.Take([]byte("new"+strconv.Itoa(i)), p, c.time())
	}
	if n := l.Len(); n > max {
		t.Fatalf("store holds %d, more than %d", n, max)
	}
	// The key added last is held, and stays limited.
	if d, _ := l.Take([]byte("new"+strconv.Itoa(max-1)), p, c.time()); d.Allowed {
		t.Error("a key the store kept lost its state")
	}
}

func BenchmarkLocalTake(b *testing.B) {
	l := NewLocal(0)
	p := Policy{Rate{1_000_000, time.Second}, 1000}
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
	}
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Take(keys[i&1023], p, now)
			i++
		}
	})
}

func TestCeilSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{0, 1},
		{time.Nanosecond, 1},
		{999 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{59*time.Second + 1, 60},
		{time.Hour, 3600},
	}
	for _, tt := range tests {
		if got := ceilSeconds(tt.d); got != tt.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}
