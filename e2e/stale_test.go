package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestStalePoolDoesNotExhaustTries is the GET failure of TestGunicornChurn
// made deterministic: when a worker dies, the pool holds several of its
// connections, all of them dead though none looks it yet. A GET that meets
// one is retried, and the retry must not spend the request's last tries on
// the dead worker's other pooled connections: here the upstream resets
// every request that arrives on a reused connection and answers every
// fresh one, so a GET can always be answered within three tries.
func TestStalePoolDoesNotExhaustTries(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Seq > 1 {
			c.Reset() // the worker behind this connection is gone
			return
		}
		// Slow enough that concurrent requests need a connection each.
		select {
		case <-time.After(50 * time.Millisecond):
		case <-c.Done():
		}
		c.Respond(200, "fresh", upstreamtest.Field{Name: "X-Request-Id", Value: r.Get("X-Request-Id")})
	})
	sl, err := StartSluice(SluiceConfig(up.Addr()), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sl.Close() })

	// Three connections go to the pool.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			cl := &Client{Addr: sl.Addr}
			defer cl.Close()
			if r := cl.Do("GET", fmt.Sprintf("warm-%d", i), nil); r.Err != nil || r.Status != 200 {
				t.Errorf("warm-up %d: status %d, %v", i, r.Status, r.Err)
			}
		})
	}
	wg.Wait()
	if idle := sl.Server.Pool.Stats().Idle; idle != 3 {
		t.Fatalf("%d idle connections after the warm-up, want 3", idle)
	}

	cl := &Client{Addr: sl.Addr}
	defer cl.Close()
	r := cl.Do("GET", "x", nil)
	if r.Err != nil || r.Status != 200 {
		t.Errorf("GET x: status %d, Proxy-Status %q, %v; want 200 from a fresh connection", r.Status, r.ProxyStatus, r.Err)
		for _, l := range sl.Log() {
			t.Logf("sluice: %s", l.Raw)
		}
	}
	if n := up.Count("GET", "/items/x"); n > 3 {
		t.Errorf("the upstream saw GET x %d times; tries is 3", n)
	}
}
