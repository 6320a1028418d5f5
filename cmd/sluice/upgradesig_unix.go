//go:build unix

package main

import (
	"os"
	"syscall"
)

// upgradeSignals make sluice run start a new binary on its listening
// sockets and drain once it serves, as USR2 makes nginx do.
var upgradeSignals = []os.Signal{syscall.SIGUSR2}

// signalProcess sends sig to the process pid (sluice reload, sluice
// upgrade).
func signalProcess(pid int, sig os.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Signal(sig)
}

// Signal names of sluice reload and sluice upgrade.
var (
	reloadSignal  os.Signal = syscall.SIGHUP
	upgradeSignal os.Signal = syscall.SIGUSR2
)
