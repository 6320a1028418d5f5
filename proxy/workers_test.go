package proxy

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// A goroutine that served a connection serves the next one, and idle ones
// end at Shutdown.
func TestWorkersServeOneConnectionAfterAnother(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()))
	oneRequest := func() {
		c := hs.dial(t)
		resp, body := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		if !c.closed(5 * time.Second) {
			t.Fatal("the connection stayed open after Connection: close")
		}
	}
	oneRequest()
	wait.For(t, "the worker to wait for another connection", func() bool { return hs.srv.workers.Idle() == 1 })
	base := runtime.NumGoroutine()
	for i := 0; i < 20; i++ {
		oneRequest()
		// At least one: a connection accepted in the instant between a
		// worker counting itself idle and its wait for work gets a
		// worker of its own, and both are idle afterwards.
		wait.For(t, "the worker to come back", func() bool { return hs.srv.workers.Idle() >= 1 })
	}
	if n := runtime.NumGoroutine(); n > base+2 {
		t.Fatalf("%d goroutines after 20 connections one after the other, %d before", n, base)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "idle workers to end at Shutdown", func() bool { return hs.srv.workers.Idle() == 0 })
}
