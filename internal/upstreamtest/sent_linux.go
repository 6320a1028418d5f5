package upstreamtest

import (
	"net"
	"syscall"
	"unsafe"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// unacked reports how many bytes written to raw its peer has not yet
// acknowledged (SIOCOUTQ), or -1 when that cannot be read.
func unacked(raw net.Conn) int {
	sc, ok := raw.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	rc.Control(func(fd uintptr) {
		var q int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&q))); e == 0 {
			n = int(q)
		}
	})
	return n
}

// Sent waits until the peer has acknowledged every byte written to the
// connection (its kernel has them: a Reset after Sent cannot discard
// them), for at most wait.Timeout. It reports whether they were.
func (c *Conn) Sent() bool {
	return wait.Until(wait.Timeout, func() bool { return unacked(c.raw) <= 0 })
}
