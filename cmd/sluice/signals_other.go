//go:build !unix

package main

import "os"

// reopenSignals: no USR1 here; the access log file is reopened on restart.
var reopenSignals []os.Signal
