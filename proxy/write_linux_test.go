package proxy

import (
	"strings"
	"testing"
)

// TestLargeBodyLeavesWithItsHead: a body in memory larger than what is
// copied into a send (a stored copy, say) leaves in one system call with
// the head before it, so in one TCP segment when it fits in one: a head
// in a segment of its own makes the client's kernel wake and acknowledge
// for it, and the rest of the body then leaves a window update at a time.
// The proxy's socket counts the data segments it sent.
func TestLargeBodyLeavesWithItsHead(t *testing.T) {
	// More than maxCopied, less than the segments of a new loopback
	// connection (at most half the client's first window, 64 KiB).
	body := strings.Repeat("0123456789abcdef", 20<<10/16)
	h := &phased{rotate: peers(testOptions()), request: func(*Session) *Response {
		r := &Response{Status: 200, AsUpstream: true, Body: []byte(body)}
		r.Header.Add("Content-Type", "application/octet-stream")
		return r
	}}
	hs := start(t, h)
	c := hs.dial(t)
	resp, got := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.StatusCode != 200 || got != body || resp.ContentLength != int64(len(body)) {
		t.Fatalf("%d, %d bytes (Content-Length %d)", resp.StatusCode, len(got), resp.ContentLength)
	}
	sc := hs.serverSide(c.nc)
	if sc == nil {
		t.Fatal("the proxy holds no connection for the client")
	}
	info := tcpInfo(sc)
	if info == nil {
		t.Fatal("no TCP_INFO for the proxy's socket")
	}
	if info.Snd_mss < uint32(len(body)+1024) {
		t.Skipf("the loopback's segments (MSS %d) are smaller than the response", info.Snd_mss)
	}
	if segs := info.Data_segs_out - info.Total_retrans; segs != 1 {
		t.Fatalf("the response left in %d data segments, want 1 (head and body together)", segs)
	}
}
