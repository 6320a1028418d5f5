package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// connection's goroutine, an accept loop, a parker, a pump, a log flush, a
// client or upstream of a test's own left running. It lets be only what
// is meant to outlive them:
//
//   - idle workers (internal/workers), matched only while idle (run on
//     top of the stack: a worker still serving has its work above it).
//     Package h2's stream-handler pool is one for the whole process, kept
//     by design, which no Server owns or closes; its idle goroutines end
//     on their own 5 to 7.5 s after their last stream. A Server's own
//     pool ends its idle workers at Shutdown.
//   - the pools' reapers (workers.(*Pool).reap): h2's lives as long as
//     its pool has idle goroutines; a Server's ends at Shutdown
//     (internal/workers' Close) or within half the idle time after it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/sluice-proxy/sluice/internal/workers.(*Pool[...]).run"),
		goleak.IgnoreAnyFunction("github.com/sluice-proxy/sluice/internal/workers.(*Pool[...]).reap"))
}
