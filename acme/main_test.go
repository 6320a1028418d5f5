package acme

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when certmagic reported a panic: it recovers
// those of its goroutines (a callback of ours among them) and writes them
// with the log package, where no test would see them. It fails them too
// when one leaves a goroutine behind, but for two that certmagic keeps by
// design, which are not a Manager's (see certmagicGoroutines): its lock
// keeper (keepLockfileFresh, asleep in time.Sleep), which notices a lock's
// release only at its next 5 s tick, and the rate limiter it keeps for
// each CA and account for the life of the process
// ((*RingBufferRateLimiter).loop, waiting in its timer or in permit);
// neither is on top of its stack, so they are matched anywhere in it.
func TestMain(m *testing.M) {
	var mu sync.Mutex
	var buf bytes.Buffer
	log.SetOutput(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}))
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).loop"),
		goleak.Cleanup(func(code int) {
			mu.Lock()
			out := buf.String()
			mu.Unlock()
			if strings.Contains(out, "panic") {
				fmt.Fprintf(os.Stderr, "certmagic reported a panic:\n%s", out)
				code = 1
			}
			os.Exit(code)
		}))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
