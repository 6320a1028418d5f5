//go:build !race

package compress

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestEncoderAllocations guards the encoder pools: a compressed response
// reuses an encoder, its window and tables, rather than allocating them
// (a zstd or brotli encoder's are hundreds of KiB to megabytes). Whole
// proxied requests of 64 KiB of JSON, client included, must allocate less
// than 64 KiB each on average. The race detector allocates on its own,
// hence the build tag.
func TestEncoderAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	body := bigJSON[:64<<10]
	raw := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	addr, _ := serve(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) { c.Write(raw) }, Options{})
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	for _, coding := range []string{"zstd", "br", "gzip"} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		req.Header.Set("Accept-Encoding", coding)
		do := func() {
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.Header.Get("Content-Encoding") != coding {
				t.Fatalf("%s: Content-Encoding %q", coding, resp.Header.Get("Content-Encoding"))
			}
		}
		for range 5 {
			do() // warm: connections, pools
		}
		const n = 50
		var before, after runtime.MemStats
		// A collection empties sync.Pools (a second one their victims),
		// and the next request then makes its encoder again: how often
		// depends on the whole process's garbage, not on this phase. With
		// collections off for the count, it measures what is guarded:
		// that a response takes a pooled encoder instead of a new one.
		gc := debug.SetGCPercent(-1)
		runtime.ReadMemStats(&before)
		for range n {
			do()
		}
		runtime.ReadMemStats(&after)
		debug.SetGCPercent(gc)
		per := (after.TotalAlloc - before.TotalAlloc) / n
		t.Logf("%s: %d bytes allocated per compressed request", coding, per)
		if per > 64<<10 {
			t.Errorf("%s: %d bytes allocated per compressed request, want under 64 KiB (pooled encoders)", coding, per)
		}
	}
}
