//go:build unix && !linux

package sock

import "syscall"

// Peek is syscall.Recvfrom with MSG_PEEK and MSG_DONTWAIT here: only on
// Linux are a socket's system calls unseen by the scheduler.
func Peek(fd int, p []byte) (int, error) {
	n, _, err := syscall.Recvfrom(fd, p, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}
