package config

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when one leaves a goroutine behind: a built
// generation's groups not closed, a server or its resources not shut. It
// ignores certmagic's lock keeper (keepLockfileFresh, asleep in
// time.Sleep, hence matched anywhere in the stack): certmagic keeps a
// lock file of its file storage fresh from a goroutine that notices the
// lock's release only at its next 5 s tick, by design.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"))
}
