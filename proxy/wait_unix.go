//go:build unix

package proxy

import (
	"net"
	"syscall"
)

// readiness waits for a client connection to become readable without
// holding a read buffer, so that an idle keep-alive connection costs only
// its goroutine and its small structures. It peeks one byte with
// MSG_DONTWAIT; the netpoller parks the goroutine while there is nothing.
type readiness struct {
	rc    syscall.RawConn
	peek  func(fd uintptr) bool
	ready bool
	buf   [1]byte
}

func (w *readiness) init(nc net.Conn) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	w.rc = rc
	w.peek = func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), w.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
			return false // nothing yet: wait for the poller
		}
		// Data, EOF or an error: the read that follows will see it.
		return true
	}
}

// wait blocks until the connection is readable or its read deadline
// passes (the error then says so).
func (w *readiness) wait() error {
	if w.rc == nil {
		return nil
	}
	return w.rc.Read(w.peek)
}
