// Package workers runs work on goroutines that outlive it.
//
// A goroutine that finished one piece of work waits a while for the next:
// the next one then starts on a stack already grown to what the work
// needs, instead of a fresh one that grows by copying, and costs no go
// statement. The most recently idle goroutine is taken first (its stack
// is the one still in cache), and those left idle longest end: a burst
// leaves no goroutines behind for long. An idle goroutine waits on a
// channel of its own, with no timer: the wait costs one receive, and one
// reaper ends the goroutines idle too long.
package workers

import (
	"sync"
	"time"
)

// Pool runs each value given to Go on a goroutine: a waiting one if there
// is one, else a new one. Its methods may be called from any goroutine.
type Pool[T any] struct {
	serve   func(T)
	maxIdle int
	idleFor time.Duration

	mu   sync.Mutex
	idle []*worker[T] // the most recently idle last
	// round counts the reaper's rounds, a quarter of idleFor apart: a
	// worker notes the round it went idle in, which costs no clock read
	// each time a piece of work ends.
	round   uint64
	reaping bool // a reaper runs
	closed  bool
	stop    chan struct{} // closed by Close: the reaper ends
}

type worker[T any] struct {
	next  chan T // capacity 1: Go never waits; closed to end the worker
	round uint64 // the reaper's round it went idle in
}

// New returns a Pool that runs serve. At most maxIdle goroutines wait for
// work; one that waited idleFor (up to a quarter as long again) ends.
func New[T any](serve func(T), maxIdle int, idleFor time.Duration) *Pool[T] {
	return &Pool[T]{serve: serve, maxIdle: maxIdle, idleFor: idleFor, stop: make(chan struct{})}
}

// Go runs serve(v) on a goroutine of the pool.
func (p *Pool[T]) Go(v T) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.next <- v
		return
	}
	p.mu.Unlock()
	go p.run(v)
}

// Idle reports how many goroutines wait for work.
func (p *Pool[T]) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// Close ends the goroutines that wait and the reaper, and makes those
// still serving end when they are done. Go still runs what it is given,
// each on a goroutine that ends after it. Close may be called more than
// once.
func (p *Pool[T]) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		close(p.stop)
	}
	p.closed = true
	for i, w := range p.idle {
		close(w.next)
		p.idle[i] = nil
	}
	p.idle = p.idle[:0]
}

func (p *Pool[T]) run(v T) {
	w := &worker[T]{next: make(chan T, 1)}
	for {
		p.serve(v)
		var zero T
		v = zero // nothing of the last piece of work is held while idle
		if !p.wait(w) {
			return
		}
		var ok bool
		if v, ok = <-w.next; !ok {
			return
		}
	}
}

// wait puts w on the idle list, unless the pool is closed or enough wait.
func (p *Pool[T]) wait(w *worker[T]) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= p.maxIdle {
		return false
	}
	w.round = p.round
	p.idle = append(p.idle, w)
	if !p.reaping {
		p.reaping = true
		go p.reap()
	}
	return true
}

// reapRounds is how many of the reaper's rounds a worker waits before it
// ends: it went idle at most a round before the next began, so it has
// waited at least reapRounds-1 rounds, idleFor, and at most reapRounds.
const reapRounds = 5

// reap ends, every quarter of idleFor, the goroutines that have waited
// idleFor or longer; it ends itself when none waits, or at Close.
func (p *Pool[T]) reap() {
	every := p.idleFor / (reapRounds - 1)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-p.stop:
			return // a closed pool has no idle goroutine and gets none
		}
		p.mu.Lock()
		p.round++
		n := 0
		for n < len(p.idle) && p.round-p.idle[n].round >= reapRounds {
			close(p.idle[n].next)
			n++
		}
		left := copy(p.idle, p.idle[n:])
		clear(p.idle[left:])
		p.idle = p.idle[:left]
		if left == 0 {
			p.reaping = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		t.Reset(every)
	}
}
