//go:build linux && !race

package proxy

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestSlowHeadAllocations guards what a connection costs while its request
// head comes a byte at a time (a slow-head attack; a client on a bad link):
// it must hold no goroutine and no read buffer while it waits, only its
// small structures and its bytes so far. 300 such connections, each woken
// once more by a byte and parked again, may add at most slowHeadBytes each
// to the heap in use after a GC, counting the test's own client side of
// each connection too (6.1 KB each when every one kept its goroutine and a
// 4 KiB buffer; 3.3 KB now), and keep at most a tenth of a goroutine each
// (the workers that wait to serve the next connection aside: 64 at most,
// whatever the number of connections). Normal requests are served
// meanwhile, and every slow head, once whole, is answered. The race
// detector allocates on its own, hence the build tag; elsewhere than on
// Linux a slow head keeps its goroutine (no parker).
func TestSlowHeadAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const (
		n             = 300
		slowHeadBytes = 4608
	)
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) { s.HeaderTimeout = time.Minute })
	for i := 0; i < 50; i++ {
		hs.get(t, "/warm")
	}
	time.Sleep(2 * parkAfter)
	var stacks uint64
	inUse := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		stacks = m.StackInuse
		return m.HeapInuse
	}
	serving := func() int { return runtime.NumGoroutine() - hs.srv.workers.Idle() }
	parked := func() int { return parkedConns(hs.srv) }
	before, stacksBefore, base := inUse(), stacks, serving()

	// Plain connections: the harness's clients each hold a 4 KiB
	// bufio.Reader, which would count here.
	conns := make([]net.Conn, n)
	send := func(nc net.Conn, s string) {
		if _, err := io.WriteString(nc, s); err != nil {
			t.Fatal(err)
		}
	}
	for i := range conns {
		nc, err := net.Dial("tcp", hs.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		conns[i] = nc
		send(nc, "GET /slow HTTP/1.1\r\nHo")
	}
	waitFor(t, "the slow heads to park", func() bool { return parked() == n })
	for _, nc := range conns {
		send(nc, "s")
	}
	time.Sleep(parkAfter / 4)
	waitFor(t, "the slow heads to park again", func() bool { return parked() == n })
	if code, body := hs.get(t, "/"); code != 200 || body != "ok" {
		t.Fatalf("a normal request beside the slow heads: %d %q", code, body)
	}
	after := inUse()
	per := (float64(after) - float64(before)) / n
	t.Logf("%.0f bytes of heap per connection with a slow head (both ends); stacks %+d KiB, with %d idle workers",
		per, (int64(stacks)-int64(stacksBefore))>>10, hs.srv.workers.Idle())
	if per > slowHeadBytes {
		t.Errorf("%.0f bytes per connection with a slow head, want at most %d", per, slowHeadBytes)
	}
	if g := serving() - base; g > n/10 {
		t.Errorf("%d goroutines more for %d parked slow heads", g, n)
	}

	for i, nc := range conns {
		send(nc, "t: a\r\n\r\n")
		c := &client{t: t, nc: nc, br: newReader(nc)}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if resp, body := c.response("GET"); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("slow head %d, once whole: %d %q", i, resp.StatusCode, body)
		}
	}
}
