package h2

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// connection's reader, flusher or linger, or a handler left waiting. The
// idle workers of handlers and uncorkers (workers.go) are meant to outlive
// their streams: they are ended before the check, and their reapers, which
// end by themselves within workerIdle, are let be.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		handlers.Close()
		uncorkers.Close()
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/sluice-proxy/sluice/internal/workers.(*Pool[...]).reap")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
