//go:build !linux

package main

// monotonicMicros: systemd is Linux only; the value is not read.
func monotonicMicros() int64 { return 0 }
