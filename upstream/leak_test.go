package upstream

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind: a group's
// checks or lookups not stopped, a proxy or an upstream not shut down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
