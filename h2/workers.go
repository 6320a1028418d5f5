package h2

import (
	"sync/atomic"
	"time"
)

// Stream handlers run on worker goroutines that outlive them: when a
// handler returns, its goroutine waits a while for the next stream, of any
// connection. A stream then starts on a stack already grown to what a
// handler needs, instead of a fresh one grown by copying during its first
// request, and opening a stream costs no goroutine (nor the closure a go
// statement with arguments allocates).
const (
	maxIdleWorkers = 128             // idle workers beyond this end at once
	workerIdle     = 5 * time.Second // an idle worker ends after this
)

var (
	work        = make(chan *Stream)
	idleWorkers atomic.Int32
)

// spawn runs st's handler on an idle worker, or on a new one when none is
// waiting.
func spawn(st *Stream) {
	select {
	case work <- st:
	default:
		go worker(st)
	}
}

func worker(st *Stream) {
	var idle *time.Timer
	for {
		st.c.runHandler(st)
		st = nil // nothing of a finished stream is held while idle
		if idleWorkers.Add(1) > maxIdleWorkers {
			idleWorkers.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case st = <-work:
			idleWorkers.Add(-1)
		case <-idle.C:
			idleWorkers.Add(-1)
			return
		}
	}
}
