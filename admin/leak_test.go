package admin

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind: a listener
// whose stop did not end its server and connections.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
