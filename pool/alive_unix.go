//go:build unix

package pool

import (
	"net"
	"syscall"
)

// sysConn holds what the liveness check and the watcher need of the socket,
// found once per connection so that neither allocates per request.
type sysConn struct {
	rc   syscall.RawConn
	fd   int
	live bool
	peek func(fd uintptr)
	buf  [1]byte
}

func (s *sysConn) init(c net.Conn) {
	s.fd = -1
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	s.rc = rc
	rc.Control(func(fd uintptr) { s.fd = int(fd) })
	s.peek = func(fd uintptr) {
		_, _, err := syscall.Recvfrom(int(fd), s.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// EAGAIN: nothing to read, the connection is fine. EOF (n == 0),
		// an error such as ECONNRESET, or a byte nobody asked for: dead.
		s.live = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR
	}
}

// alive reports whether an idle connection can still carry a request: its
// peer has not closed or reset it and has sent nothing unasked (an idle
// HTTP/1.1 server never speaks first; a stray byte is most likely a 408 or
// the start of a close). It does one non-blocking MSG_PEEK, through
// Control rather than Read: a read deadline left from the connection's last
// response may have passed while it idled, and Read would report that
// instead of looking at the socket.
func (s *sysConn) alive() bool {
	if s.rc == nil {
		return true
	}
	s.live = false
	if err := s.rc.Control(s.peek); err != nil {
		return false
	}
	return s.live
}
