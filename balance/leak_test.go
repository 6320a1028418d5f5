package balance

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind: a group's
// lookups, checks or sweep not stopped by Close, a check target not shut.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
