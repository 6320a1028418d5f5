package ratelimit_test

import (
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/ratelimit"
)

// The tests in this file run on testing/synctest's clock: a Limiter reads
// the time from the session's Start or time.Now, and both follow the
// bubble's clock, so a budget refilling over seconds is checked exactly,
// in no real time.

// TestLimiterRefillsOnTheClock: a key's burst goes through at once, the
// next request waits for the rate, and the whole burst is back once the
// budget has refilled; the Retry-After of a refused request counts the
// time until the next one is allowed, rounded up.
func TestLimiterRefillsOnTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &ratelimit.Limiter{Key: ratelimit.Route{}, Store: ratelimit.NewLocal(0),
			Policy: ratelimit.Policy{Rate: ratelimit.Rate{Count: 1, Period: 2 * time.Second}, Burst: 3}}
		// request sends one request through the phase and returns its
		// status (200: let through) and Retry-After. Every other request
		// leaves the session's Start zero: the Limiter reads the clock
		// itself then.
		n := 0
		request := func() (int, string) {
			s := &proxy.Session{ClientIP: netip.MustParseAddr("10.1.2.3")}
			if n++; n%2 == 0 {
				s.Start = time.Now()
			}
			r := l.RequestFilter(s)
			if r == nil {
				return 200, ""
			}
			return r.Status, string(r.Header.Get("Retry-After"))
		}
		expect := func(when string, want ...string) {
			t.Helper()
			var got []string
			for range want {
				code, after := request()
				got = append(got, strings.TrimSuffix(strings.Join([]string{strconv.Itoa(code), after}, " "), " "))
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("%s: %v, want %v", when, got, want)
			}
		}
		expect("at first", "200", "200", "200", "429 2")
		time.Sleep(time.Second)
		expect("1 s on", "429 1")
		time.Sleep(time.Second - time.Nanosecond)
		expect("a nanosecond before one request's worth", "429 1")
		time.Sleep(time.Nanosecond)
		expect("2 s on", "200", "429 2")
		time.Sleep(6 * time.Second)
		expect("8 s on, the budget whole again", "200", "200", "200", "429 2")
		if c := l.Counts(); c != (ratelimit.Counts{Allowed: 7, Limited: 5}) {
			t.Fatalf("counts %+v", c)
		}
	})
}

// TestStoreErrorLoggedEvery10s: a failing store is logged at its first
// failure, then at most once every 10 s, each line saying how many
// failures it left out since the last.
func TestStoreErrorLoggedEvery10s(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log proxytest.Buffer
		l := &ratelimit.Limiter{Name: "api", Store: failing{}, Log: slog.New(slog.NewTextHandler(&log, nil)),
			Policy: ratelimit.Policy{Rate: ratelimit.Rate{Count: 1, Period: time.Second}, Burst: 1}}
		fail := func() {
			if r := l.RequestFilter(&proxy.Session{ClientIP: netip.MustParseAddr("10.1.2.3"), Start: time.Now()}); r != nil {
				t.Fatalf("answered %d; the Limiter allows what its store cannot decide", r.Status)
			}
		}
		for range 10 { // 0 s to 9 s: one line
			fail()
			time.Sleep(time.Second)
		}
		fail() // 10 s: the next line, nine left out
		time.Sleep(9*time.Second + 999*time.Millisecond)
		fail() // 19.999 s: left out
		time.Sleep(time.Millisecond)
		fail() // 20 s
		var suppressed []string
		for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
			_, n, _ := strings.Cut(line, "suppressed=")
			suppressed = append(suppressed, n)
		}
		if got := strings.Join(suppressed, " "); got != "0 9 1" {
			t.Fatalf("lines logged with suppressed=%q, want 0 9 1:\n%s", got, log.String())
		}
	})
}
