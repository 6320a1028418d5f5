//go:build unix

package proxy

import "syscall"

// pending reports whether bytes from the client wait unread on the socket
// of c: one non-blocking MSG_PEEK. It is false where the socket is unknown
// (a net.Pipe in tests).
func (c *conn) pending() bool {
	if c.ready.rc == nil {
		return false
	}
	var n int
	var b [1]byte
	c.ready.rc.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return n > 0
}
