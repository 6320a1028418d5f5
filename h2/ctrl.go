package h2

import (
	"sync"

	"golang.org/x/net/http2"
)

// ctrlQueue is what both ends of a connection keep alike under the
// connection's lock: the frames owed to the peer (acknowledgements,
// WINDOW_UPDATE, RST_STREAM, GOAWAY), queued for the next writer so that
// the reading goroutine never waits for the peer to read, the budget of
// frames that ask work and carry none, and the flow-control windows both
// ways, with the stream halves they serve (inbound.go, outbound.go).
type ctrlQueue struct {
	mu       sync.Mutex
	queue    []ctrl
	flushing bool // a flusher goroutine is running
	glitches budget
	recv     receiver
	send     sender
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

// enqueue queues x, a frame the peer asked for; it fails when the peer has
// left more than max unread (CVE-2019-9512, CVE-2019-9515).
func (q *ctrlQueue) enqueue(x ctrl, max int) error {
	q.mu.Lock()
	q.queue = append(q.queue, x)
	over := len(q.queue) > max
	q.mu.Unlock()
	if over {
		return connErr{http2.ErrCodeEnhanceYourCalm, "too many queued frames"}
	}
	return nil
}

// writeSide is a connection's writing: lockWrite takes the write lock and
// writes the queued frames, unlockWrite flushes and releases it.
type writeSide interface {
	lockWrite() (*writeBuf, error)
	unlockWrite(force bool) error
}

// startFlush makes sure the queued frames get written by w: if no flusher
// runs, one is started. The read loop calls it (through kick) before it
// waits for input, so that its answers to a burst of frames leave
// together, and never writes itself.
func (q *ctrlQueue) startFlush(w writeSide) {
	q.mu.Lock()
	if q.flushing || len(q.queue) == 0 {
		q.mu.Unlock()
		return
	}
	q.flushing = true
	q.mu.Unlock()
	go q.flush(w)
}

func (q *ctrlQueue) flush(w writeSide) {
	for {
		_, err := w.lockWrite()
		if err == nil {
			err = w.unlockWrite(false)
		}
		q.mu.Lock()
		if err != nil || len(q.queue) == 0 {
			q.flushing = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
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

// writeCtrl writes x to fr if it is a frame both ends write alike, and
// reports whether it was.
func writeCtrl(fr *http2.Framer, x *ctrl) (bool, error) {
	switch x.kind {
	case cSettingsAck:
		return true, fr.WriteSettingsAck()
	case cPing, cPingAck:
		return true, fr.WritePing(x.kind == cPingAck, x.data)
	case cRST:
		return true, fr.WriteRSTStream(x.id, http2.ErrCode(x.val))
	case cWindow:
		return true, fr.WriteWindowUpdate(x.id, x.val)
	}
	return false, nil
}
