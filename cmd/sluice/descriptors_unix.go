//go:build unix

package main

import "syscall"

// descriptorLimit returns the process's soft and hard limits on open
// files (RLIMIT_NOFILE).
func descriptorLimit() (soft, hard uint64, ok bool) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0, false
	}
	return uint64(l.Cur), uint64(l.Max), true
}
