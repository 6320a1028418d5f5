package cache

import "testing"

// TestHitAllocations guards what a hit from a memory store costs: the
// primary key as a string (the store's map key), the Response handed to
// the engine, and its head's two pieces of storage (its fields and their
// bytes): four allocations per request, and no more. The body is not
// copied: a 1 MiB hit allocates as little.
func TestHitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	if testing.Short() {
		t.Skip("short")
	}
	for _, size := range []int{100, 1 << 20} {
		rt := hitClient(t, size, nil)
		rt() // the miss that stores it
		allocs := testing.AllocsPerRun(1000, rt)
		t.Logf("a %d-byte hit: %.2f allocations", size, allocs)
		if allocs > 4 {
			t.Errorf("a %d-byte hit allocates %.2f times, want at most 4", size, allocs)
		}
	}
}
