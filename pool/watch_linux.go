package pool

import (
	"syscall"
	"time"
)

// watcher notices idle connections whose peer closed them (FIN, RST or any
// unexpected byte), with one epoll instance for the whole pool: adding and
// removing a connection costs one epoll_ctl each, and no goroutine waits per
// connection. Each registration carries the connection's id, not its fd, so
// an event that arrives after the connection was taken is ignored.
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

const watchEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

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

// remove unregisters c; p.mu held.
func (w *watcher) remove(c *Conn) {
	if w.ep < 0 || c.id == 0 {
		return
	}
	if c.sys.fd >= 0 {
		syscall.EpollCtl(w.ep, syscall.EPOLL_CTL_DEL, c.sys.fd, nil)
	}
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
