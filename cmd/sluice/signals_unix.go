//go:build unix

package main

import (
	"os"
	"syscall"
)

// reopenSignals make sluice run reopen its access log file, as USR1 makes
// nginx do: what logrotate's postrotate sends.
var reopenSignals = []os.Signal{syscall.SIGUSR1}
