package pool

import (
	"syscall"
	"time"
)

// watcher notices idle connections whose peer closed them (FIN or RST),
// with one epoll instance for the whole pool and no goroutine per
// connection. A connection is registered once, when it is first pooled,
// for peer-close events only (EPOLLRDHUP, edge-triggered; not EPOLLIN, so
// responses arriving while it is in use wake nothing), and leaves the epoll
// set when it is closed. Events name the connection's id, not its fd; an
// event for a connection that is not idle is ignored, and the check before
// use catches what was missed (a peer that closed while the connection was
// in use, or sent an unasked byte).
type watcher struct {
	ep     int
	wakeR  int // read end of a pipe that interrupts epoll_wait on Close
	wakeW  int
	events [64]syscall.EpollEvent
}

func newWatcher() watcher {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return watcher{ep: -1}
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(ep)
		return watcher{ep: -1}
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN}
	ev.Fd, ev.Pad = 0, 0 // id 0 is the wake pipe
	syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fds[0], &ev)
	return watcher{ep: ep, wakeR: fds[0], wakeW: fds[1]}
}

const watchEvents = syscall.EPOLLRDHUP | 1<<31 // EPOLLET, which package syscall defines as a negative int

// add registers c; p.mu held.
func (w *watcher) add(c *Conn) {
	if w.ep < 0 {
		return
	}
	fd := c.sys.fd
	if fd < 0 {
		return
	}
	ev := syscall.EpollEvent{Events: watchEvents, Fd: int32(uint32(c.id)), Pad: int32(uint32(c.id >> 32))}
	syscall.EpollCtl(w.ep, syscall.EPOLL_CTL_ADD, fd, &ev)
}

// wait blocks up to d and appends the ids of connections with events.
func (w *watcher) wait(ids []uint64, d time.Duration) []uint64 {
	if w.ep < 0 {
		time.Sleep(d)
		return ids
	}
	n, err := syscall.EpollWait(w.ep, w.events[:], int(d/time.Millisecond))
	if err != nil {
		return ids
	}
	for _, ev := range w.events[:n] {
		id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
		if id != 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

func (w *watcher) wake() {
	if w.ep >= 0 {
		syscall.Write(w.wakeW, []byte{1})
	}
}

func (w *watcher) close() {
	if w.ep >= 0 {
		syscall.Close(w.ep)
		syscall.Close(w.wakeR)
		syscall.Close(w.wakeW)
	}
}
