package ratelimit

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind: a proxy or
// an upstream not shut down, a Redis client not closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
