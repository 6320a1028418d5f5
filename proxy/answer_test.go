package proxy

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/retry"
)

func TestLogLimit(t *testing.T) {
	var l logLimit
	t0 := time.Unix(1000, 0)
	type step struct {
		at   time.Duration
		ok   bool
		left int
	}
	steps := []step{
		// Five lines in the first second, then nothing.
		{0, true, 0}, {100 * time.Millisecond, true, 0}, {200 * time.Millisecond, true, 0},
		{300 * time.Millisecond, true, 0}, {400 * time.Millisecond, true, 0},
		{500 * time.Millisecond, false, 0}, {600 * time.Millisecond, false, 0}, {999 * time.Millisecond, false, 0},
		// The next second's first line says three were held back.
		{time.Second, true, 3}, {time.Second + time.Millisecond, true, 0},
		// A quiet spell changes nothing: each second has its five.
		{10 * time.Second, true, 0},
	}
	for i, s := range steps {
		left, ok := l.allow(t0.Add(s.at))
		if ok != s.ok || left != s.left {
			t.Errorf("step %d at %v: allow = %d, %v; want %d, %v", i, s.at, left, ok, s.left, s.ok)
		}
	}
}

// exhausting turns every failure to connect into sluice running out of
// descriptors, as if its socket(2) had failed with EMFILE.
type exhausting struct{ ordered }

func (h *exhausting) FailToConnect(s *Session, p *Peer, e *fault.Error, f retry.Facts) *fault.Error {
	return &fault.Error{Kind: fault.Exhausted, Source: fault.Internally, Context: "connecting to " + p.Addr, Cause: syscall.EMFILE}
}

// TestExhaustedTriesLogFewLines: when every request fails because sluice
// is out of descriptors, the error log has a few lines a second, not one
// per request, and the lines after a gap say how many were left out.
func TestExhaustedTriesLogFewLines(t *testing.T) {
	dead := upstreamtest.Dead(t)
	hs := start(t, &exhausting{*inOrder(withPolicy(&retry.Policy{Tries: 1}), dead)})
	const requests = 40
	begin := time.Now()
	for range requests {
		resp, _ := hs.do(t, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		if resp.StatusCode != 503 || !strings.HasPrefix(resp.Header.Get("Proxy-Status"), "sluice; error=proxy_internal_error") {
			t.Fatalf("got %d, Proxy-Status %q; want 503 proxy_internal_error", resp.StatusCode, resp.Header.Get("Proxy-Status"))
		}
	}
	seconds := int(time.Since(begin)/time.Second) + 1
	lines := strings.Count(hs.errors.String(), "upstream try failed; giving up")
	if lines == 0 || lines > logLimitPerSecond*seconds || lines == requests {
		t.Errorf("%d lines for %d requests in under %d s; want 1 to %d", lines, requests, seconds, logLimitPerSecond*seconds)
	}
}
