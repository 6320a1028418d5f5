// Package wait is the tests' one way to wait for a condition that no
// channel announces: poll it until it holds, and fail the test if it does
// not in time.
//
// A test waits for an event, never for a length of time: where the code
// under test announces the event (a channel, a callback, a WaitGroup),
// the test waits on that; where it does not (a counter that a goroutine
// bumps after answering, a socket the peer closed), the test polls the
// condition with For; where the event is that code reached a wait of its
// own (a call parked on a socket), the condition is Blocked. Inside a
// testing/synctest bubble the test uses synctest.Wait instead, which needs
// no polling.
package wait

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Timeout is how long For waits before it fails the test. It only bounds a
// test that is failing anyway, so it is generous: a loaded machine running
// the race detector must not turn a slow pass into a failure.
const Timeout = 10 * time.Second

// For polls cond until it returns true, and fails the test with "timed out
// waiting for what" if it does not within Timeout. It polls every
// millisecond at first and backs off to every 20 ms, so a condition that
// holds soon is seen soon. It must be called from the test's goroutine
// (it calls t.Fatalf); cond runs on that goroutine too.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Timeout, what, cond)
}

// Within is For with a timeout of d, for a wait known to take longer than
// Timeout on a loaded machine (an ACME issuance, a child process).
func Within(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Until polls cond as For does, for at most d, and reports whether it
// held: for a helper that reports failure its own way, or a goroutine
// that is not the test's.
func Until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for !cond() {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
	return true
}

// Blocked reports whether a goroutine whose stack holds fn is blocked in
// state: the event, for a test, that code which announces nothing has
// reached a wait (a call waiting on a socket, a goroutine on a channel).
// fn is matched as the stack trace writes it, package name first
// ("pool.(*sysConn).send("); state as the trace's header names it ("IO
// wait", "chan receive", "select", "sleep").
func Blocked(fn, state string) bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if strings.Contains(head, "["+state) && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}
