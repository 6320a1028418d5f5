package upstreamtest

import (
	"errors"
	"net"
	"sync"
)

// acceptor is the listening side both kinds of upstream share (Server,
// Canned): it accepts connections and serves each on a goroutine of its
// own, and close ends the listener, closes the connections still open and
// waits for every goroutine it started, so that nothing of an upstream
// outlives its test.
type acceptor struct {
	ln      net.Listener
	mu      sync.Mutex
	open    map[net.Conn]struct{} // accepted and not yet done with
	accepts int
	closed  bool
	wg      sync.WaitGroup // the accept loop and one per connection
}

// start accepts on ln until close, and runs serve(nc, n) for the n-th
// connection (from 1) on a goroutine of its own; nc is closed when serve
// returns. acceptErr, when not nil, is told why accepting stopped, unless
// close closed the listener.
func (a *acceptor) start(ln net.Listener, serve func(nc net.Conn, n int), acceptErr func(error)) {
	a.ln, a.open = ln, make(map[net.Conn]struct{})
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				if acceptErr != nil && !errors.Is(err, net.ErrClosed) {
					acceptErr(err)
				}
				return
			}
			a.mu.Lock()
			if a.closed {
				a.mu.Unlock()
				nc.Close()
				return
			}
			a.accepts++
			n := a.accepts
			a.open[nc] = struct{}{}
			a.wg.Add(1)
			a.mu.Unlock()
			go func() {
				defer a.wg.Done()
				defer a.forget(nc)
				serve(nc, n)
			}()
		}
	}()
}

// forget closes nc and removes it from the connections close closes.
func (a *acceptor) forget(nc net.Conn) {
	nc.Close()
	a.mu.Lock()
	delete(a.open, nc)
	a.mu.Unlock()
}

// count returns the number of connections accepted so far.
func (a *acceptor) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.accepts
}

// close ends the listener and the connections still open, and waits for
// the goroutines serving them. It may be called more than once.
func (a *acceptor) close() {
	a.mu.Lock()
	a.closed = true
	a.ln.Close()
	for nc := range a.open {
		nc.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}
