package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestConnectionsAndInFlight: Connections reports each open client
// connection with its listener and protocol, and InFlight the requests
// under way, for the admin metrics.
func TestConnectionsAndInFlight(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	defer close(release)
	addr := strings.TrimPrefix(up.URL, "http://")

	h2hs, h2c := startH2(t, peers(testOptions(), addr), ListenerOptions{Protocols: []string{"h2c", "http/1.1"}})
	hs := h2hs
	count := func() map[string]int {
		got := map[string]int{}
		hs.srv.Connections(func(listener, protocol string) { got[listener+" "+protocol]++ })
		return got
	}
	if n := hs.srv.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d before any request", n)
	}
	c1 := hs.dial(t)
	c1.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	c2 := hs.dial(t)
	c2.send("GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, _ := c2.response("GET"); resp.StatusCode != 200 {
		t.Fatalf("fast request: %d", resp.StatusCode)
	}
	wait.For(t, "the slow request in flight", func() bool { return hs.srv.InFlight() == 1 })
	resp, err := h2c.Get("http://" + hs.addr + "/fast")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := map[string]int{hs.addr + " http/1.1": 2, hs.addr + " h2": 1}
	wait.For(t, "three connections", func() bool {
		got := count()
		return got[hs.addr+" http/1.1"] == want[hs.addr+" http/1.1"] && got[hs.addr+" h2"] == 1 && len(got) == 2
	})
	release <- struct{}{}
	if resp, _ := c1.response("GET"); resp.StatusCode != 200 {
		t.Fatalf("slow request: %d", resp.StatusCode)
	}
	wait.For(t, "no request in flight", func() bool { return hs.srv.InFlight() == 0 })
	c1.nc.Close()
	c2.nc.Close()
	wait.For(t, "the HTTP/1.1 connections gone", func() bool { return count()[hs.addr+" http/1.1"] == 0 })
}
