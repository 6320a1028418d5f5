package cache

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind: a proxy or
// origin not shut, a background revalidation or a collapsed fetch still
// running, a store not closed (otter's goroutines, a disk store's sweep),
// a fleet's subscriber not stopped. It ignores the goroutines of package
// h2's stream-handler pool (h2/workers.go): one pool for the whole
// process, kept by design, whose idle goroutines end on their own 5 to
// 7.5 s after their last stream, and which no Server owns or closes.
// Idle, they wait in workers.(*Pool).run; their reaper waits in reap.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/sluice-proxy/sluice/internal/workers.(*Pool[...]).run"),
		goleak.IgnoreTopFunction("github.com/sluice-proxy/sluice/internal/workers.(*Pool[...]).reap"))
}
