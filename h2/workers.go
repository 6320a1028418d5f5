package h2

import (
	"time"

	"github.com/sluice-proxy/sluice/internal/workers"
)

// Stream handlers run on goroutines that outlive them (see package
// workers): when a handler returns, its goroutine waits a while for the
// next stream, of any connection. A stream then starts on a stack already
// grown to what a handler needs, and opening a stream costs no goroutine
// (nor the closure a go statement with arguments allocates).
//
// The bound on idle workers must exceed the streams that finish together:
// at 128, under 16 connections × 10 streams, the workers beyond it ended
// and their successors grew fresh stacks by copying (2% of the CPU in a
// profile; 0.85% at 1024, what is left being the collector's shrinking of
// idle stacks). An idle worker's stack is shrunk by the collector too, so
// a thousand idle cost a few MiB for at most workerIdle.
const (
	maxIdleWorkers = 1024            // idle workers beyond this end at once
	workerIdle     = 5 * time.Second // an idle worker ends after this
)

var handlers = workers.New(func(st *Stream) { st.c.runHandler(st) }, maxIdleWorkers, workerIdle)

// uncorkers run the flushes writers leave for after the scheduler's round
// (core.uncork), on goroutines that wait for the next one as handlers'
// do: one a connection at most at a time, and no go statement's closure.
// Made by init: uncork's flush may start another.
var uncorkers *workers.Pool[*core]

func init() {
	uncorkers = workers.New((*core).uncork, maxIdleWorkers, workerIdle)
}

// spawn runs st's handler on an idle worker, or on a new one when none is
// waiting.
func spawn(st *Stream) { handlers.Go(st) }
