package cache

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-proxy/sluice/internal/redistest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// applied records the purges a fleet member applied.
type applied struct {
	mu   sync.Mutex
	urls []string
}

func (a *applied) apply(p Purge) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.urls = append(a.urls, p.URLs...)
	return len(p.URLs)
}

func (a *applied) has(url string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Contains(a.urls, url)
}

// TestFleet: three instances on one Redis: a purge one publishes reaches
// the other two, not itself (it applied the purge before publishing); an
// instance whose subscription was cut catches up on what was published
// while it was away.
func TestFleet(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var got [3]applied
	var fleets [3]*Fleet
	for i := range fleets {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { c.Close() })
		fleets[i] = NewFleet(c, got[i].apply, nil)
		fleets[i].Start(ctx)
		t.Cleanup(fleets[i].Close)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	wait.For(t, "three subscribers", func() bool {
		n, _ := admin.PubSubNumSub(ctx, FleetChannel).Result()
		return n[FleetChannel] == 3
	})
	if err := fleets[0].Publish(ctx, Purge{URLs: []string{"http://a/1"}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the purge applied by the others", func() bool { return got[1].has("http://a/1") && got[2].has("http://a/1") })
	if got[0].has("http://a/1") {
		t.Error("the publisher applied its own purge again")
	}

	// Cut every subscription; publish while they may be away.
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if err := fleets[0].Publish(ctx, Purge{URLs: []string{"http://a/2"}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the purge published while cut off applied", func() bool { return got[1].has("http://a/2") && got[2].has("http://a/2") })
}
