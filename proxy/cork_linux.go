package proxy

import (
	"net"

	"golang.org/x/sys/unix"
)

// cork sets or clears TCP_CORK on c, and reports whether it could. While
// set, the kernel sends only full segments: a head written before a
// sendfile(2) leaves with the file's first bytes. Clearing it sends what
// is left.
func cork(c *net.TCPConn, on bool) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	v := 0
	if on {
		v = 1
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, v)
	}); err != nil {
		return false
	}
	return serr == nil
}
