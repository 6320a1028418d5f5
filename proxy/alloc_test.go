//go:build !race

package proxy

import (
	"io"
	"log/slog"
	"net"
	"runtime"
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

// TestH2Allocations guards the HTTP/2 paths, each measured with its
// benchmark's set-up (h2bench_test.go): an HTTP/2 client in front of an
// HTTP/1.1 upstream (the count includes the test client's HEADERS frame,
// which x/net's framer allocates), an HTTP/1.1 client in front of an
// HTTP/2 upstream, and an HTTP/2 client making gRPC-shaped calls to an
// HTTP/2 upstream (both counts include the upstream's HTTP/2 server, in
// the process). The test client's requests after its first refer to its
// fields in the HPACK table, as a browser's or h2load's do. The ceilings
// are what they cost today (3, 7 and 12; a connection keeps a few stopped
// timers for its waits with a deadline, and waits that overlap may make
// one more; a stream's read buffer is a recycled one, and so are the
// server's and the client's streams, from pools the collector may empty)
// with a little room. Of the first, sluice's own are two: x/net's
// framer's HEADERS frame, and the request id's string.
//
// The bytes allocated are guarded too: they, not the count, set how often
// the collector runs, and with a proxy's small live heap it ran every few
// thousand requests. 128, 288 and 516 bytes a request today; an
// HTTP/2 request to an HTTP/1.1 upstream allocated 1,047 before its
// server's streams were recycled, and the two rows to an HTTP/2 upstream
// 1,057 and 1,282 (8 and 13 allocations) before its client's streams
// were (a ClientStream is 768 bytes).
func TestH2Allocations(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tests := []struct {
		name     string
		trip     func(t *testing.T) func() error
		max      float64
		maxBytes float64
	}{
		{"h2 -> h1", func(t *testing.T) func() error { return h2ToH1(t, 64).roundTrip }, 4, 300},
		{"h1 -> h2", func(t *testing.T) func() error { return h1ToH2(t).do }, 8, 350},
		{"h2 -> h2", func(t *testing.T) func() error { return h2ToH2(t).roundTrip }, 14, 650},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			trip := tt.trip(t)
			if err := trip(); err != nil {
				t.Fatal(err)
			}
			var err error
			run := func() {
				if e := trip(); e != nil {
					err = e
				}
			}
			for _, m := range []struct {
				what     string
				got, max float64
			}{
				{"allocations", testing.AllocsPerRun(2000, run), tt.max},
				{"bytes allocated", bytesPerRun(2000, run), tt.maxBytes},
			} {
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %.2f %s per request", tt.name, m.got, m.what)
				if m.got > m.max {
					t.Errorf("%s: %.2f %s per request, want at most %v", tt.name, m.got, m.what, m.max)
				}
			}
		})
	}
}

// TestConnAllocations guards what a connection per request costs sluice
// in allocations, beyond what the net package's accept and the test's own
// dial cost (measured on a listener that accepts and closes): its conn,
// the callback its reads and writes share, its RawConn, and its client's
// address as a string, 4 today (8 before the descriptor was learnt from
// the first read, the wait's callback made only by a wait, and the
// inline server passed as an interface rather than a method value); a
// wait for a request not there at accept (a goroutine scheduled before
// the client's bytes came) adds its callback.
func TestConnAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			nc.Close()
		}
	}()
	buf := make([]byte, 4096)
	dialOnly := func(addr string, req []byte) func() {
		return func() {
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			if req != nil {
				nc.Write(req)
			}
			for {
				if _, err := nc.Read(buf); err != nil {
					break
				}
			}
			nc.Close()
		}
	}
	base := testing.AllocsPerRun(500, dialOnly(ln.Addr().String(), nil))
	rt, stop := benchProxy(t, 64)
	defer stop()
	req := []byte("GET /bench HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
	allocs := testing.AllocsPerRun(500, dialOnly(rt.nc.RemoteAddr().String(), req))
	t.Logf("%.2f allocations per connection, %.2f of them the dial's and the accept's", allocs, base)
	if allocs-base > 5 {
		t.Errorf("%.2f allocations per connection beyond the dial's and the accept's, want at most 5", allocs-base)
	}
}

// bytesPerRun is testing.AllocsPerRun for the bytes allocated: the mean
// over runs calls of f, after one call to warm up, on one P. What a
// request allocates sets how often the collector runs, whatever the count
// of its allocations.
func bytesPerRun(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(runs)
}
