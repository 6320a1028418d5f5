//go:build !unix

package main

// descriptorLimit: no RLIMIT_NOFILE here.
func descriptorLimit() (soft, hard uint64, ok bool) { return 0, 0, false }
