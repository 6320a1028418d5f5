package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy"
)

// The upstream reads the first request for each path and resets the
// connection without answering, as a crashing process would. The POST to
// SafePath is retried and answered; any other POST gets 502 and reaches
// the upstream once.
func TestPostRetryForOnePath(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		mu.Lock()
		first := !seen[r.Target]
		seen[r.Target] = true
		mu.Unlock()
		if first {
			c.Reset()
			return
		}
		c.Respond(200, "ok")
	})
	addr := proxytest.Serve(t, &proxy.Server{Handler: &Proxy{Peer: &proxy.Peer{Addr: up.Addr()}}})
	post := func(path string) int {
		resp, _ := proxytest.Do(t, addr, "POST "+path+" HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nq=1")
		return resp.StatusCode
	}

	if got := post(SafePath); got != 200 {
		t.Fatalf("POST %s: %d, want 200 after a retry", SafePath, got)
	}
	if n := up.Count("POST", SafePath); n != 2 {
		t.Fatalf("upstream saw POST %s %d times, want 2", SafePath, n)
	}
	if got := post("/orders"); got != 502 {
		t.Fatalf("POST /orders: %d, want 502", got)
	}
	if n := up.Count("POST", "/orders"); n != 1 {
		t.Fatalf("upstream saw POST /orders %d times, want 1", n)
	}

	// A body larger than the body buffer is not held whole once it went
	// out: the hook says retry, sluice does not, and no upstream is ever
	// sent a head that promises bytes sluice no longer has.
	big := strings.Repeat("q", 200<<10)
	resp, _ := proxytest.Do(t, addr, fmt.Sprintf("POST %s?big HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", SafePath, len(big), big))
	if resp.StatusCode != 502 || !strings.Contains(resp.Header.Get("Proxy-Status"), "connection_terminated") {
		t.Fatalf("200 KiB POST %s: %d %q, want 502 connection_terminated", SafePath, resp.StatusCode, resp.Header.Get("Proxy-Status"))
	}
	n := 0
	for _, r := range up.Requests() {
		if r.Target != SafePath+"?big" {
			continue
		}
		n++
		if !r.Complete || len(r.Decoded) != len(big) {
			t.Fatalf("upstream got a %d-byte body for a %d-byte request", len(r.Decoded), len(big))
		}
	}
	if n != 1 {
		t.Fatalf("upstream saw the 200 KiB POST %d times, want 1", n)
	}
}
