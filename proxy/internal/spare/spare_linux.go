package spare

import (
	"net"
	"syscall"
)

// Spare is a descriptor an accept loop holds in reserve (/dev/null, read
// only) for the moment the process has no other: accept(2) then fails
// with EMFILE before it looks at the queue, and without a descriptor to
// spare the clients waiting there get no answer at all, only their own
// timeout, however long sluice stays short. With one, the loop closes it,
// accepts each waiting client on the descriptor it frees, answers 503 and
// closes, then opens the spare again (shed); the same descriptor serves
// every client in turn. A descriptor is what accepting a client costs, so
// one is the whole reserve. (libev's documentation describes the trick,
// closing the clients unanswered.)
//
// Each Serve holds its own, used only by its goroutine. Another goroutine
// may take the descriptor in the moment it is free (a dial): the loop then
// backs off, and takes one again at its next try or accept that finds one
// free.
//
// The zero Spare holds nothing, and takes its descriptor at its first Hold.
type Spare struct {
	fd    int // when held
	held  bool
	never bool // /dev/null cannot be opened here (a chroot): no reserve
}

// Hold returns a Spare holding its descriptor, if one can be had.
func Hold() *Spare {
	sp := new(Spare)
	sp.Hold()
	return sp
}

// Hold opens the spare descriptor if it is not held; it fails quietly.
func (sp *Spare) Hold() {
	if sp.held || sp.never {
		return
	}
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	switch {
	case err == nil:
		sp.fd, sp.held = fd, true
	case err != syscall.EMFILE && err != syscall.ENFILE && err != syscall.EINTR:
		sp.never = true // not once per accepted connection
	}
}

// Held reports whether the spare descriptor is held.
func (sp *Spare) Held() bool { return sp.held }

// Release closes the spare descriptor if it is held.
func (sp *Spare) Release() {
	if sp.held {
		syscall.Close(sp.fd)
		sp.held = false
	}
}

// shedMax bounds the clients one call of Shed turns away, so that the
// accept loop soon tries again to accept normally.
const shedMax = 256

// Shed answers the clients waiting on ln when an accept failed for want of
// descriptors: with the spare descriptor released, it accepts them one by
// one, answers each with answer (nothing when it is empty) and closes it,
// and then holds the spare again. It returns how many it answered: none
// when no spare is held (it tries to take one first), ln has no socket to
// reach, no client was waiting, or another goroutine took the released
// descriptor first.
//
// The accepts are raw accept4(2) calls on ln's descriptor, non-blocking: a
// client turned away costs no poller registration, only a write, a read
// and a close.
func (sp *Spare) Shed(ln net.Listener, answer []byte) int {
	sp.Hold() // if it was taken while released, and one is free now
	sc, ok := ln.(syscall.Conn)
	if !ok || !sp.held {
		return 0
	}
	rc, rerr := sc.SyscallConn()
	if rerr != nil {
		return 0
	}
	n := 0
	var buf []byte
	sp.Release()
	rc.Control(func(lfd uintptr) {
		for n < shedMax {
			fd, _, aerr := syscall.Accept4(int(lfd), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
			switch aerr {
			case nil:
			case syscall.ECONNABORTED, syscall.EINTR:
				continue
			default:
				// EAGAIN: every waiting client was answered. EMFILE:
				// the descriptor was taken elsewhere first.
				return
			}
			if buf == nil {
				buf = make([]byte, 4096)
			}
			answerShed(fd, answer, buf)
			n++
		}
	})
	sp.Hold()
	return n
}

// answerShed writes answer on the accepted socket fd and closes it.
// The socket is new, so its buffer takes the answer whole. What the client
// sent is read before the close, up to 16 reads of buf (with
// TCP_DEFER_ACCEPT its request has arrived already), so that the close
// sends a FIN and not a reset, which could destroy the answer before the
// client reads it.
func answerShed(fd int, answer, buf []byte) {
	if len(answer) > 0 {
		syscall.Write(fd, answer)
	}
	for range 16 {
		if n, err := syscall.Read(fd, buf); n <= 0 || err != nil {
			break
		}
	}
	syscall.Close(fd)
}
