package logbuf

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind (a timer's
// flush still running after Close).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
