//go:build !race

package proxy

import (
	"io"
	"log/slog"
	"testing"
)

// TestRoundTripAllocations guards the hot path: a proxied GET on kept-alive
// connections must not allocate more than twice per request (it allocates
// nothing today). The race detector allocates on its own, hence the build
// tag.
//
// Over TLS to the upstream, crypto/tls allocates a 24-byte reader each
// time it reads a record from its socket (readFromUntil's atLeastReader):
// on sluice's side once for the check before use and once for the
// response, and once in the test's own TLS upstream. That is 3
// allocations per proxied GET today; sluice's own code adds none, and the
// guard allows it none.
func TestRoundTripAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, tt := range []struct {
		overTLS bool
		max     float64
	}{{false, 2}, {true, 3}} {
		for _, size := range []int{64, 16 << 10} {
			rt, stop := benchProxyOver(t, size, nil, tt.overTLS)
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
			t.Logf("%d-byte response, TLS %v: %.2f allocations per proxied request", size, tt.overTLS, allocs)
			if allocs > tt.max {
				t.Errorf("%d-byte response, TLS %v: %.2f allocations per request, want at most %v", size, tt.overTLS, allocs, tt.max)
			}
		}
	}
}

// TestAccessLogAllocations guards the access log's share: with the default
// text access log on, a proxied GET allocates at most four times (two
// today: one string holding the texts taken from the request, which the
// attributes slice, and the log record's attributes past its first five;
// the request id included).
func TestAccessLogAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	rt, stop := benchProxyWith(t, 64, func(srv *Server) {
		srv.AccessLog = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	defer stop()
	var err error
	allocs := testing.AllocsPerRun(2000, func() {
		if e := rt.do(); e != nil {
			err = e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.2f allocations per proxied request with the access log on", allocs)
	if allocs > 4 {
		t.Errorf("%.2f allocations per request with the access log on, want at most 4", allocs)
	}
}
