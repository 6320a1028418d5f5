package pool

import (
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/internal/epoll"
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
	set    *epoll.Set // nil when epoll is unavailable
	wakeR  int        // read end of a pipe that interrupts the wait on Close
	wakeW  int
	events [64]syscall.EpollEvent
}

func newWatcher() watcher {
	set, err := epoll.New()
	if err != nil {
		return watcher{}
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		set.Close()
		return watcher{}
	}
	set.Control(syscall.EPOLL_CTL_ADD, fds[0], syscall.EPOLLIN, 0) // id 0 is the wake pipe
	return watcher{set: set, wakeR: fds[0], wakeW: fds[1]}
}

const watchEvents = syscall.EPOLLRDHUP | 1<<31 // EPOLLET, which package syscall defines as a negative int

// add registers c; p.mu held.
func (w *watcher) add(c *Conn) {
	if w.set == nil || c.sys.fd < 0 {
		return
	}
	w.set.Control(syscall.EPOLL_CTL_ADD, c.sys.fd, watchEvents, c.id)
}

// wait waits up to d and appends the ids of connections with events.
func (w *watcher) wait(ids []uint64, d time.Duration) []uint64 {
	if w.set == nil {
		time.Sleep(d)
		return ids
	}
	n, err := w.set.Wait(w.events[:], d)
	if err != nil {
		return ids
	}
	for _, ev := range w.events[:n] {
		if id := epoll.ID(ev); id != 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

func (w *watcher) wake() {
	if w.set != nil {
		syscall.Write(w.wakeW, []byte{1})
	}
}

func (w *watcher) close() {
	if w.set != nil {
		w.set.Close()
		syscall.Close(w.wakeR)
		syscall.Close(w.wakeW)
	}
}
