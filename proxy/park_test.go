package proxy

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// Idle keep-alive connections give up their goroutines after parkAfter
// (on Linux) and come back when their next request arrives.
func TestIdleConnectionsPark(t *testing.T) {
	if newParker(&Server{}) == nil {
		t.Skip("no parker on this platform: idle connections keep their goroutine")
	}
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()))
	hs.get(t, "/warm")
	time.Sleep(2 * parkAfter)
	// Idle workers (workers.go) wait for any connection, not for these.
	serving := func() int { return runtime.NumGoroutine() - int(hs.srv.idleWorkers.Load()) }
	base := serving()

	const n = 50
	var clients []*client
	for i := 0; i < n; i++ {
		c := hs.dial(t)
		if resp, _ := c.roundTrip("GET /a HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		clients = append(clients, c)
	}
	waitFor(t, "idle connections to park", func() bool { return serving() < base+n/2 })
	for i, c := range clients {
		if resp, body := c.roundTrip("GET /b HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("client %d after parking: %d %q", i, resp.StatusCode, body)
		}
	}
}

func TestParkedConnectionIdleTimeout(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) { s.IdleTimeout = parkAfter + 300*time.Millisecond })
	c := hs.dial(t)
	if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	start := time.Now()
	if !c.closed(5 * time.Second) {
		t.Fatal("a parked connection outlived its idle timeout")
	}
	if d := time.Since(start); d < parkAfter {
		t.Fatalf("closed after %v, before the idle timeout", d)
	}
}

func TestParkedConnectionClosedByClient(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	time.Sleep(2 * parkAfter)
	hs.srv.mu.Lock()
	before := len(hs.srv.conns)
	hs.srv.mu.Unlock()
	c.nc.Close()
	waitFor(t, "the parked connection to be forgotten", func() bool {
		hs.srv.mu.Lock()
		defer hs.srv.mu.Unlock()
		return len(hs.srv.conns) == before-1
	})
}

// A slow head parked behind idle connections, whose deadlines are later,
// is answered at its own: the parker orders deadlines, not arrivals. Then
// the parker lingers on the closing connection, reading what the client
// still sends, until the client closes.
func TestParkedSlowHeadAnsweredBeforeIdleOnes(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) {
		s.IdleTimeout = time.Minute
		s.HeaderTimeout = parkAfter + 300*time.Millisecond
	})
	for i := 0; i < 3; i++ {
		c := hs.dial(t)
		if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
	}
	time.Sleep(2 * parkAfter) // the idle ones park, deadlines a minute away
	c := hs.dial(t)           // reads time out after 10s: long before a minute
	c.send("GET / HTTP/1.1\r\nHo")
	resp, err := readHTTP(c)
	if err != nil {
		t.Fatalf("no answer to a slow head parked behind idle connections: %v", err)
	}
	if resp.StatusCode != 408 {
		t.Fatalf("slow head: %s, want 408", resp.Status)
	}
	c.send("st: still sending") // read and thrown away while lingering
	c.nc.(*net.TCPConn).CloseWrite()
	if !c.closed(5 * time.Second) {
		t.Fatal("the lingering connection was not closed after the client's close")
	}
}
