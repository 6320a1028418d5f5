//go:build !linux

package pool

import "time"

// watcher is a no-op where epoll is not available: dead idle connections
// are then found by the check before use and the periodic sweep.
type watcher struct{ stop chan struct{} }

func newWatcher() watcher    { return watcher{stop: make(chan struct{}, 1)} }
func (w *watcher) add(*Conn) {}
func (w *watcher) wake() {
	select {
	case w.stop <- struct{}{}:
	default:
	}
}
func (w *watcher) close() {}
func (w *watcher) wait(ids []uint64, d time.Duration) []uint64 {
	select {
	case <-w.stop:
	case <-time.After(d):
	}
	return ids
}
