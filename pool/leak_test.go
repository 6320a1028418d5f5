package pool

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind (a pool not
// closed, a watcher that outlived it).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
