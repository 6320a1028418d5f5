//go:build unix && !linux

package sock

import "syscall"

// Read is syscall.Read here: only on Linux is a socket's read made unseen
// by the scheduler.
func Read(fd int, p []byte) (int, error) { return syscall.Read(fd, p) }

// Write is syscall.Write here, as Read is syscall.Read.
func Write(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
