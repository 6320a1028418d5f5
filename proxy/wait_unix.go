//go:build unix

package proxy

import (
	"errors"
	"io"
	"net"
	"syscall"
)

var errWouldBlock = errors.New("would block")

// readiness waits for a client connection to become readable without
// holding a read buffer, so that an idle keep-alive connection costs only
// its goroutine and its small structures. It peeks one byte with
// MSG_DONTWAIT; the netpoller parks the goroutine while there is nothing.
type readiness struct {
	rc      syscall.RawConn
	peek    func(fd uintptr) bool
	readNow func(fd uintptr) bool
	nb      nonblock
	buf     [1]byte
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
	w.nb.w = w
	w.readNow = func(fd uintptr) bool {
		n, err := syscall.Read(int(fd), w.nb.p)
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			w.nb.n, w.nb.err = 0, errWouldBlock
		case err != nil:
			w.nb.n, w.nb.err = 0, err
		case n == 0:
			w.nb.n, w.nb.err = 0, io.EOF
		default:
			w.nb.n, w.nb.err = n, nil
		}
		return true
	}
	w.peek = func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), w.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
			return false // nothing yet: wait for the poller
		}
		// Data, EOF or an error: the read that follows will see it.
		return true
	}
}

// nonblock reads what the socket holds now, without waiting: one read(2)
// whose EAGAIN comes back as errWouldBlock.
type nonblock struct {
	w   *readiness
	p   []byte
	n   int
	err error
}

func (nb *nonblock) Read(p []byte) (int, error) {
	if nb.w.rc == nil {
		return 0, errWouldBlock
	}
	nb.p = p
	if err := nb.w.rc.Read(nb.w.readNow); err != nil {
		return 0, err
	}
	return nb.n, nb.err
}

// wait blocks until the connection is readable or its read deadline
// passes (the error then says so).
func (w *readiness) wait() error {
	if w.rc == nil {
		return nil
	}
	return w.rc.Read(w.peek)
}

// reader returns a reader of what the socket holds now, never waiting.
func (w *readiness) reader() io.Reader { return &w.nb }
