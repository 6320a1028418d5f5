package e2e

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestKeepAliveTimeoutRace sends requests around an upstream's keep-alive
// timeout: the upstream announces "Keep-Alive: timeout=1" and closes a
// connection idle for exactly 1 s, and the clients send in rounds 0.9 to
// 1.1 s apart, so that pooled connections are wanted just before, at and
// just after the moment the upstream closes them. GETs and POSTs
// (without Idempotency-Key) alternate; every request has its own id. No
// client may see a 5xx, and the upstream must see each id exactly once.
func TestKeepAliveTimeoutRace(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 7 s: skipped with -short")
	}
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.KeepAliveTimeout(time.Second, upstreamtest.Echo()))
	sl, err := StartSluice(SluiceConfig(up.Addr()), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sl.Close() })

	// Every client sends at the same moments, a few milliseconds apart,
	// so that each round's requests find the connections of the round
	// before idle for just about the gap.
	gaps := []time.Duration{900 * time.Millisecond, 950 * time.Millisecond, time.Second,
		1050 * time.Millisecond, 1100 * time.Millisecond, time.Second}
	const clients = 5
	results := make([][]Result, clients)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			cl := &Client{Addr: sl.Addr}
			defer cl.Close()
			at := start.Add(time.Duration(c) * 100 * time.Microsecond)
			for i := range len(gaps) + 1 {
				if i > 0 {
					at = at.Add(gaps[i-1])
				}
				// The stimulus: the request goes out at its moment, as
				// the upstream's keep-alive timer, real time, runs out.
				time.Sleep(time.Until(at))
				id := fmt.Sprintf("k%d-%d", c, i)
				if (c+i)%2 == 0 {
					results[c] = append(results[c], cl.Do("POST", id, Body(id, 32)))
				} else {
					results[c] = append(results[c], cl.Do("GET", id, nil))
				}
			}
		})
	}
	wg.Wait()
	if err := sl.Close(); err != nil {
		t.Errorf("sluice: %v", err)
	}

	seen := make(map[string]int)
	for _, r := range up.Requests() {
		seen[r.Get("X-Request-Id")]++
	}
	n := 0
	for _, rs := range results {
		for _, r := range rs {
			n++
			switch {
			case r.Err != nil:
				t.Errorf("%s %s: %v", r.Method, r.ID, r.Err)
			case r.Status != 200:
				t.Errorf("%s %s: status %d, Proxy-Status %q", r.Method, r.ID, r.Status, r.ProxyStatus)
			case r.Method == "POST" && !bytes.Equal(r.Body, Body(r.ID, 32)):
				t.Errorf("%s %s: echoed body %q", r.Method, r.ID, r.Body)
			}
			if k := seen[r.ID]; k != 1 {
				t.Errorf("%s %s: the upstream saw it %d times", r.Method, r.ID, k)
			}
		}
	}
	for _, err := range up.Errors() {
		t.Errorf("upstream: %v", err)
	}
	log := sl.Log()
	for i := range log {
		t.Logf("sluice: %s", log[i].Raw)
	}
	t.Logf("%d requests, %d upstream connections; pool: %+v", n, up.Accepts(), sl.Server.Pool.Stats())
}
