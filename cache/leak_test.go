package cache

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind: a proxy or
// origin not shut, a background revalidation or a collapsed fetch still
// running, a disk store's sweep or a fleet's subscriber not stopped by
// Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
