package observe

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind: a proxy, a
// pool or an upstream not shut down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
