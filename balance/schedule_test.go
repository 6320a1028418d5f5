package balance

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The tests in this file run the group's goroutines in testing/synctest
// bubbles: their timers run on the bubble's clock, so the schedule itself
// (intervals, jitter, backoff, the sweep) is checked to the nanosecond, in
// no real time. The group reads that clock too (Options.Now left nil:
// internal/clock follows the bubble's time). Nothing in a bubble may wait
// on a socket: lookups and checks are served in memory.

// timeline records when something happened, as offsets from its start.
type timeline struct {
	start time.Time
	mu    sync.Mutex
	at    []time.Duration
}

func newTimeline() *timeline { return &timeline{start: time.Now()} }

func (tl *timeline) mark() {
	tl.mu.Lock()
	tl.at = append(tl.at, time.Since(tl.start))
	tl.mu.Unlock()
}

func (tl *timeline) times() []time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.at)
}

// sleepUntil sleeps until d after tl's start, and waits for the bubble's
// goroutines to finish what that moment started.
func (tl *timeline) sleepUntil(d time.Duration) {
	time.Sleep(time.Until(tl.start.Add(d)))
	synctest.Wait()
}

func seconds(ss ...float64) []time.Duration {
	var ds []time.Duration
	for _, s := range ss {
		ds = append(ds, time.Duration(s*float64(time.Second)))
	}
	return ds
}

// TestDNSSchedule: a name is looked up at Start, then every
// ResolveInterval; after a failed lookup it is retried after 1 s, then 2 s,
// 4 s… (never later than the interval), keeping its last addresses; a
// success ends the backoff. Close stops the lookups.
func TestDNSSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newTimeline()
		var failing atomic.Bool
		failing.Store(true)
		o := Options{Resolver: func(ctx context.Context, host string) ([]netip.Addr, error) {
			tl.mark()
			if failing.Load() {
				return nil, errors.New("SERVFAIL")
			}
			return loopback(1), nil
		}}
		g := NewGroup("u", []*Server{{Name: "app.internal:80", ResolveInterval: time.Minute}}, nil, o)
		g.Start(context.Background())
		defer g.Close()

		// Failing from the start: backoff from 1 s, capped at the
		// interval.
		tl.sleepUntil(130 * time.Second)
		if got, want := tl.times(), seconds(0, 1, 3, 7, 15, 31, 63, 123); !slices.Equal(got, want) {
			t.Fatalf("lookups while failing at %v, want %v", got, want)
		}
		if got := addrs(g); got != "" {
			t.Fatalf("servers %q before any answer", got)
		}
		// Answered: every interval.
		failing.Store(false)
		tl.sleepUntil(250 * time.Second)
		if got, want := tl.times()[8:], seconds(183, 243); !slices.Equal(got, want) {
			t.Fatalf("lookups once answered at %v, want %v", got, want)
		}
		if got := addrs(g); got != "127.0.0.1:80" {
			t.Fatalf("servers %q", got)
		}
		// Failing again: the backoff starts over at 1 s, and the last
		// addresses stay.
		failing.Store(true)
		tl.sleepUntil(308 * time.Second)
		if got, want := tl.times()[10:], seconds(303, 304, 306); !slices.Equal(got, want) {
			t.Fatalf("lookups after a new failure at %v, want %v", got, want)
		}
		if got := addrs(g); got != "127.0.0.1:80" {
			t.Fatalf("servers %q after failed lookups, want the last good ones", got)
		}
		g.Close()
		n := len(tl.times())
		time.Sleep(time.Hour)
		if got := len(tl.times()); got != n {
			t.Fatalf("%d lookups after Close", got-n)
		}
	})
}

// checkServer answers each check made on the pipe it is given with the
// response of the moment.
type checkServer struct {
	tl       *timeline
	response atomic.Value // string
}

func (cs *checkServer) dial(ctx context.Context, addr string) (net.Conn, error) {
	cs.tl.mark()
	c, s := net.Pipe()
	resp := cs.response.Load().(string)
	go func() {
		defer s.Close()
		br := bufio.NewReader(s)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" {
				break
			}
		}
		io.WriteString(s, resp)
	}()
	return c, nil
}

// TestActiveCheckSchedule: a server's first check comes within the first
// Interval and each later one Interval ±10% after the last; the Fall-th
// failed check in a row takes it out, not one before, and the Rise-th
// passed one brings it back.
func TestActiveCheckSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 10 * time.Second
		cs := &checkServer{tl: newTimeline()}
		cs.response.Store(ok200)
		var rec recorder
		o := Options{Rand: newRand(1), MaxFails: -1, ConsecutiveFailures: -1, OnChange: rec.OnChange,
			Active: &ActiveCheck{Interval: interval, Rise: 2, Fall: 3}, dial: cs.dial}
		g := NewGroup("u", servers(1), nil, o)
		g.Start(context.Background())
		defer g.Close()
		s := g.Servers()[0]

		// next waits for the next check and its verdict, and returns how
		// many checks have run.
		next := func() int {
			n := len(cs.tl.times())
			for len(cs.tl.times()) == n {
				time.Sleep(100 * time.Millisecond)
			}
			synctest.Wait()
			return n + 1
		}
		for range 3 {
			next()
			if !s.Healthy() {
				t.Fatalf("out while passing: %s", s.State())
			}
		}
		cs.response.Store(err500)
		for i := 1; i <= 3; i++ {
			next()
			if s.Healthy() != (i < 3) {
				t.Fatalf("after %d failed checks: %s; want out at the 3rd", i, s.State())
			}
		}
		cs.response.Store(ok200)
		for i := 1; i <= 2; i++ {
			next()
			if s.Healthy() != (i == 2) {
				t.Fatalf("after %d passed checks: %s; want back at the 2nd", i, s.State())
			}
		}
		for range 20 {
			next()
		}
		if got := rec.String(); got != "a=false a=true" {
			t.Fatalf("OnChange calls %q", got)
		}
		at := cs.tl.times()
		if at[0] >= interval {
			t.Fatalf("first check at %v, want within the first %v", at[0], interval)
		}
		varied := false
		for i := 1; i < len(at); i++ {
			d := at[i] - at[i-1]
			if d < interval*9/10 || d > interval*11/10 {
				t.Fatalf("check %d came %v after the one before, want %v ±10%%", i+1, d, interval)
			}
			varied = varied || d != interval
		}
		if !varied {
			t.Fatal("every check came exactly one interval after the last: no jitter")
		}
	})
}

// TestSweepAnnouncesDownTimeOver: a server whose down time ends while no
// Pick looks at it is announced healthy by the group's once-a-second
// sweep, within a second of the end.
func TestSweepAnnouncesDownTimeOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newTimeline()
		var rec recorder
		o := Options{MaxFails: 1, FailTimeout: 10 * time.Second, ConsecutiveFailures: -1, NoProbe: true, OnChange: rec.OnChange}
		g := NewGroup("u", servers(1, 1), nil, o)
		g.Start(context.Background())
		defer g.Close()
		a := g.Servers()[0]
		tl.sleepUntil(time.Second / 4)
		fail(g, a, 1) // down until 10.25 s
		tl.sleepUntil(10 * time.Second)
		if got := rec.String(); got != "a=false" {
			t.Fatalf("OnChange calls %q before the down time ended", got)
		}
		tl.sleepUntil(11 * time.Second)
		if got := rec.String(); got != "a=false a=true" {
			t.Fatalf("OnChange calls %q a second after the down time ended, want the return announced", got)
		}
	})
}

// TestActiveCheckTimeout: a check that gets no answer fails at its
// Timeout, counted from its dial, not a moment before or after.
func TestActiveCheckTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newTimeline()
		var failedAt time.Duration
		o := Options{Rand: newRand(1), MaxFails: -1, ConsecutiveFailures: -1,
			Active: &ActiveCheck{Interval: 10 * time.Second, Timeout: 3 * time.Second, Rise: 1, Fall: 1},
			OnChange: func(s *Server, healthy bool) {
				if !healthy {
					failedAt = time.Since(tl.start)
				}
			},
			dial: func(ctx context.Context, addr string) (net.Conn, error) {
				tl.mark()
				c, s := net.Pipe()
				go io.Copy(io.Discard, s) // reads the check, answers nothing
				return c, nil
			}}
		g := NewGroup("u", servers(1), nil, o)
		g.Start(context.Background())
		defer g.Close()
		s := g.Servers()[0]
		for len(tl.times()) == 0 {
			time.Sleep(100 * time.Millisecond)
		}
		dialed := tl.times()[0]
		tl.sleepUntil(dialed + 3*time.Second - time.Nanosecond)
		if !s.Healthy() {
			t.Fatalf("out %v after the dial, before the 3 s timeout: %s", 3*time.Second-time.Nanosecond, s.State())
		}
		tl.sleepUntil(dialed + 3*time.Second)
		if s.Healthy() || failedAt != dialed+3*time.Second {
			t.Fatalf("at the timeout: healthy %v, taken out at %v; want out at %v", s.Healthy(), failedAt, dialed+3*time.Second)
		}
		// The connection's deadline and the check's context end at the
		// same instant: the error is the read's timeout or the close the
		// context made, whichever came first.
		if st := s.State(); !strings.HasPrefix(st, "unhealthy (active: 1 failed checks: ") {
			t.Fatalf("State = %q, want one failed check", st)
		}
	})
}
