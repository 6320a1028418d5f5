package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

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
	srv := &proxy.Server{Handler: &Proxy{Peer: &proxy.Peer{Addr: up.Addr()}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()

	do := func(req string) int {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		io.WriteString(nc, req)
		resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	post := func(path string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nq=1"
	}
	if got := do(post(SafePath)); got != 200 {
		t.Fatalf("POST %s: %d, want 200 after a retry", SafePath, got)
	}
	if n := up.Count("POST", SafePath); n != 2 {
		t.Fatalf("upstream saw POST %s %d times, want 2", SafePath, n)
	}
	if got := do(post("/orders")); got != 502 {
		t.Fatalf("POST /orders: %d, want 502", got)
	}
	if n := up.Count("POST", "/orders"); n != 1 {
		t.Fatalf("upstream saw POST /orders %d times, want 1", n)
	}
}
