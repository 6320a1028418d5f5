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
	events [64]syscall.EpollEvent
}

func newWatcher() watcher {
	set, err := epoll.New()
	if err != nil {
		return watcher{}
	}
	return watcher{set: set}
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
		ids = append(ids, epoll.ID(ev))
	}
	return ids
}

func (w *watcher) wake() {
	if w.set != nil {
		w.set.Wake()
	}
}

func (w *watcher) close() {
	if w.set != nil {
		w.set.Close()
	}
}
