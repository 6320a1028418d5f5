// Package sock finds the socket under a connection, for the reads and
// checks the net package does not offer (a peek, a read that never waits,
// a write followed by a wait without a read), dials the two kinds of
// upstream address: a TCP host:port, or a Unix domain socket's "unix:PATH",
// and listens on a Unix domain socket (removing one a crashed process left).
package sock

import (
	"net"
	"syscall"
)

// Raw returns c's RawConn and file descriptor, found once so that the
// per-request operations on it allocate nothing; ok is false when c is not
// a socket (a net.Pipe in tests, an HTTP/2 stream, say), and then Raw
// allocates nothing either. The descriptor is valid until c is closed.
func Raw(c net.Conn) (rc syscall.RawConn, fd int, ok bool) {
	sc, isSock := c.(syscall.Conn)
	if !isSock {
		return nil, -1, false
	}
	return raw(sc)
}

// RawConn returns c's RawConn, without its descriptor, which Raw finds
// with a call that allocates; ok is false when c is not a socket.
func RawConn(c net.Conn) (rc syscall.RawConn, ok bool) {
	sc, isSock := c.(syscall.Conn)
	if !isSock {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}

// FD returns the descriptor of rc, -1 when it is closed.
func FD(rc syscall.RawConn) int {
	fd := -1
	if err := rc.Control(func(s uintptr) { fd = int(s) }); err != nil {
		return -1
	}
	return fd
}

// raw is Raw's work on a socket: apart, because the descriptor its
// callback sets lives on the heap, and Raw's own frame would put it there
// on every call.
func raw(sc syscall.Conn) (syscall.RawConn, int, bool) {
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, -1, false
	}
	fd := -1
	if err := rc.Control(func(s uintptr) { fd = int(s) }); err != nil {
		return nil, -1, false
	}
	return rc, fd, true
}
