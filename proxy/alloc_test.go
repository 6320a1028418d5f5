//go:build !race

package proxy

import "testing"

// TestRoundTripAllocations guards the hot path: a proxied GET on kept-alive
// connections must not allocate more than twice per request (it allocates
// nothing today). The race detector allocates on its own, hence the build
// tag.
func TestRoundTripAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, size := range []int{64, 16 << 10} {
		rt, stop := benchProxy(t, size)
		var err error
		allocs := testing.AllocsPerRun(2000, func() {
			if e := rt.do(); e != nil {
				err = e
			}
		})
		stop()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d-byte response: %.2f allocations per proxied request", size, allocs)
		if allocs > 2 {
			t.Errorf("%d-byte response: %.2f allocations per request, want at most 2", size, allocs)
		}
	}
}
