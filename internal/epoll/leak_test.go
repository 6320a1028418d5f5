//go:build linux

package epoll

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind (one still
// in Wait after its Set was closed).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
