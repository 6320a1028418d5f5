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
	if lines == 0 || lines > logLinesPerSecond*seconds || lines == requests {
		t.Errorf("%d lines for %d requests in under %d s; want 1 to %d", lines, requests, seconds, logLinesPerSecond*seconds)
	}
}
