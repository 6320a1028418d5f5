package h2

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// ctrlQueue is the connection's lock and the part of what it guards that
// is about frames: the frames owed to the peer (acknowledgements,
// WINDOW_UPDATE, RST_STREAM, GOAWAY), queued for the next writer so that
// the reading goroutine never waits for the peer to read, the budget of
// frames that ask work and carry none, and the flow-control windows both
// ways, with the stream halves they serve (inbound.go, outbound.go).
type ctrlQueue struct {
	mu       sync.Mutex
	queue    []ctrl
	flushing bool  // a flusher goroutine is running
	holding  bool  // it holds PING answers back for a while (pongHold)
	nspares  uint8 // timers in spares
	glitches budget
	recv     receiver
	send     sender
	spares   *spareTimer // stopped timers, for the next waits with a deadline
}

// spareTimer is a timer a connection keeps between the waits it serves,
// in a list: a wait with a deadline then costs no allocation. Since Go
// 1.23 a stopped timer delivers nothing stale, so a timer can serve wait
// after wait.
type spareTimer struct {
	*time.Timer
	next *spareTimer
}

// maxSpareTimers bounds the timers a connection keeps: as many as its
// streams usually wait at once.
const maxSpareTimers = 4

// timer returns a timer that fires after d: a spare one reset, or a new
// one. The lock is held.
func (q *ctrlQueue) timer(d time.Duration) *spareTimer {
	if t := q.spares; t != nil {
		q.spares, t.next = t.next, nil
		q.nspares--
		t.Reset(d)
		return t
	}
	return &spareTimer{Timer: time.NewTimer(d)}
}

// spare stops t and keeps it for the next wait. The lock is held.
func (q *ctrlQueue) spare(t *spareTimer) {
	t.Stop()
	if q.nspares < maxSpareTimers {
		q.spares, t.next = t, q.spares
		q.nspares++
	}
}

// glitch charges n to the budget of frames that ask work and carry none:
// PING, SETTINGS, WINDOW_UPDATE, PRIORITY, RST_STREAM, unknown types,
// empty DATA (RFC 9113 §10.5).
func (q *ctrlQueue) glitch(n float64) error {
	q.mu.Lock()
	ok := q.glitches.take(n)
	q.mu.Unlock()
	if !ok {
		return connErr{http2.ErrCodeEnhanceYourCalm, "too many control frames"}
	}
	return nil
}

// answer queues x, a frame the peer asked for; it fails when the peer has
// left more than maxQueued unread (CVE-2019-9512, CVE-2019-9515).
func (q *ctrlQueue) answer(x ctrl) error {
	q.mu.Lock()
	q.queue = append(q.queue, x)
	over := len(q.queue) > maxQueued
	q.mu.Unlock()
	if over {
		return connErr{http2.ErrCodeEnhanceYourCalm, "too many queued frames"}
	}
	return nil
}

// kick makes sure the queued frames get written: if no flusher runs, one
// is started. The read loop calls it (connReader) before it waits for
// input, so that its answers to a burst of frames leave together, and
// never writes itself.
func (c *core) kick() {
	c.mu.Lock()
	if c.flushing || len(c.queue) == 0 {
		c.mu.Unlock()
		return
	}
	c.flushing = true
	c.holding = pongsOnly(c.queue)
	c.mu.Unlock()
	// A goroutine of its own, not a pooled one: it may be the only one
	// a connection starts (a test's, on synctest's clock, must start it
	// in its bubble).
	go c.flushQueue()
}

// pongHold is how long answers to PINGs alone wait for a write to go out
// with. gRPC clients and servers send a PING each time DATA comes (to size
// their windows), and each answer written alone was a write(2) of its own,
// a third of a unary call's writes through sluice; the next frames of the
// connection (the next call's answer) mostly come within it. The peer's
// measure of the round trip grows by as much at most, a check of an idle
// connection is answered that much later, and a PING flood still meets
// the glitch budget before the queue's bound (maxQueued).
const pongHold = 5 * time.Millisecond

// pongsOnly reports whether every queued frame answers a PING.
func pongsOnly(q []ctrl) bool {
	for _, x := range q {
		if x.kind != cPingAck {
			return false
		}
	}
	return true
}

// flushQueue writes the queued frames, after the goroutines runnable now
// have had their turn: the handlers the frames just read woke are about
// to write, and the queue (a PING's answer, a WINDOW_UPDATE) goes out in
// their write instead of one of its own. Answers to PINGs alone may wait
// longer (pongHold); what is queued meanwhile waits with them.
func (c *core) flushQueue() {
	c.mu.Lock()
	hold := c.holding
	c.mu.Unlock()
	if hold {
		time.Sleep(pongHold)
	} else {
		runtime.Gosched()
	}
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.flushing, c.holding = false, false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		_, err := c.lockWrite()
		if err == nil {
			err = c.unlockWrite(false)
		}
		if err != nil {
			c.mu.Lock()
			c.flushing, c.holding = false, false
			c.mu.Unlock()
			return
		}
	}
}

// takeQueue takes the queued frames for a writer (the write lock held):
// nil when there are none. It gives them back with doneQueue once written.
func (q *ctrlQueue) takeQueue() []ctrl {
	q.mu.Lock()
	defer q.mu.Unlock()
	x := q.queue
	if len(x) == 0 {
		return nil // an empty slice stays for the next frames
	}
	q.queue = nil
	return x
}

// doneQueue keeps x, written, for the frames queued next, unless others
// were queued meanwhile or x grew large.
func (q *ctrlQueue) doneQueue(x []ctrl) {
	clear(x)
	q.mu.Lock()
	if q.queue == nil && cap(x) <= 64 {
		q.queue = x[:0]
	}
	q.mu.Unlock()
}
