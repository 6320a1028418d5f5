//go:build unix

package static

import "syscall"

// mkfifo makes a FIFO, which the server must refuse without waiting for
// a writer.
func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }
