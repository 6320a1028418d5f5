//go:build !race

package idempotency_test

import (
	"testing"

	"github.com/sluice-proxy/sluice/idempotency"
)

// TestPhaseAllocations guards what the layer costs a keyed POST in
// allocations: through the proxy, with a local store, a request forwarded
// under a new key and its answer kept allocates nothing (its tee, which
// holds its claim and the recorder, comes from a pool) besides the
// store's growth as it holds more keys (its tables, pages of records,
// queue and chunks of answers grow, and are not garbage); without the
// layer it allocates nothing either. AllocsPerRun's average is a whole
// number, rounded down, so the growth (a fraction of an allocation a
// request) does not show. It was 11 before the store, the recorder and
// the renewer were made to allocate nothing per request, and 1 before
// the tees were pooled. The race detector allocates on its own, hence
// the build tag.
func TestPhaseAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	p := newKeyedPoster(t, newLayer(t, idempotency.Options{Store: idempotency.NewLocal(1<<20, 1<<30)}))
	for range 2000 {
		p.post() // the store's first pages and tables
	}
	allocs := testing.AllocsPerRun(4000, p.post)
	t.Logf("%.2f allocations per keyed POST through the layer", allocs)
	if allocs > 0 {
		t.Errorf("%.2f allocations per keyed POST through the layer, want none", allocs)
	}
}
