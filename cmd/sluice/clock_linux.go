package main

import (
	"syscall"
	"unsafe"
)

// monotonicMicros is CLOCK_MONOTONIC in microseconds, the clock systemd's
// MONOTONIC_USEC= is read on.
func monotonicMicros() int64 {
	const clockMonotonic = 1
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return ts.Nano() / 1000
}
