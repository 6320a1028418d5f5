//go:build !unix

package main

import (
	"errors"
	"os"
)

// upgradeSignals: no USR2 here; a binary upgrade is a restart.
var upgradeSignals []os.Signal

var (
	reloadSignal  os.Signal
	upgradeSignal os.Signal
)

func signalProcess(int, os.Signal) error {
	return errors.New("signals are not supported on this system")
}
