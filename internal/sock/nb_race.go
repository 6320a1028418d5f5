//go:build linux && race

package sock

import "syscall"

// Read is syscall.Read under the race detector, which learns from the
// syscall package's reads and writes that a write to a socket happens
// before the read of its bytes (in another goroutine, maybe of a test):
// without that, every exchange over a socket would look like a race.
func Read(fd int, p []byte) (int, error) { return syscall.Read(fd, p) }

// Write is syscall.Write under the race detector, as Read is syscall.Read.
func Write(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
