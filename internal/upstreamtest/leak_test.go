package upstreamtest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind: a server's
// accept loop or a connection's handler still running after Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
