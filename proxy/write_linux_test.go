package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLargeBodyLeavesWithItsHead: a body larger than what is copied into a
// send leaves with the head before it, in one TCP segment when it fits in
// one: a body in memory (a stored copy, say) in one writev, a file's first
// piece in the head's write and the rest by sendfile, corked in between. A
// head in a segment of its own makes the client's kernel wake and
// acknowledge for it, and the rest of a large body then leaves a window
// update at a time. The proxy's socket counts the data segments it sent.
func TestLargeBodyLeavesWithItsHead(t *testing.T) {
	// More than maxCopied (and smallFile), less than the segments of a
	// new loopback connection (at most half the client's first window,
	// 64 KiB).
	body := strings.Repeat("0123456789abcdef", 20<<10/16)
	path := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	file := func(asUpstream bool) func() *Response {
		return func() *Response {
			f, err := os.Open(path)
			if err != nil {
				return Text(500, err.Error())
			}
			return &Response{Status: 200, AsUpstream: asUpstream, File: &FileBody{File: f, Size: int64(len(body))}}
		}
	}
	for _, tt := range []struct {
		name     string
		response func() *Response
	}{
		{"in memory", func() *Response { return &Response{Status: 200, AsUpstream: true, Body: []byte(body)} }},
		{"file, stand-in for an upstream's", file(true)},
		{"file, sluice's answer", file(false)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hs := start(t, &phased{rotate: peers(testOptions()), request: func(*Session) *Response { return tt.response() }})
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
		})
	}
}
