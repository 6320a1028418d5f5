package e2e

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind: a sluice,
// an upstream or a client not closed. It ignores the goroutines of package
// h2's stream-handler pool (h2/workers.go): one pool for the whole
// process, kept by design, whose idle goroutines end on their own 5 to
// 7.5 s after their last stream, and which no Server owns or closes. Idle,
// they wait in workers.(*Pool).run; their reaper waits in reap. A
// proxy.Server's own pool of these ends at Shutdown.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/sluice-proxy/sluice/internal/workers.(*Pool[...]).run"),
		goleak.IgnoreTopFunction("github.com/sluice-proxy/sluice/internal/workers.(*Pool[...]).reap"))
}
