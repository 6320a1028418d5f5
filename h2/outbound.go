package h2

import "time"

// outbound is the sending half of a stream, either end's, guarded by its
// connection's lock: the stream's send window, and the writer waiting for
// credit.
type outbound struct {
	sendWin    int64
	wantCredit bool // a writer waits for credit
	wdl        time.Time
	// wwake is poked when what a blocked writer waits for may have
	// changed; made as inbound's rwake.
	wwake chan struct{}
}

// sender is a connection's side of its streams' outbound halves, kept by
// both ends under the connection's lock: the connection's send window and
// what the peer's SETTINGS allow.
type sender struct {
	sendWin      int64  // connection send window
	peerWindow   int64  // the peer's SETTINGS_INITIAL_WINDOW_SIZE, each new stream's send window
	peerMaxFrame uint32 // the peer's SETTINGS_MAX_FRAME_SIZE
}

func newSender() sender {
	return sender{sendWin: defaultWindow, peerWindow: defaultWindow, peerMaxFrame: defaultMaxFrame}
}

// take takes up to want bytes of send credit for out, no more than a
// frame, from the stream's and the connection's windows: 0 when there is
// none. The lock is held.
func (q *ctrlQueue) take(out *outbound, want int) int {
	n := min(int64(want), out.sendWin, q.send.sendWin, int64(q.send.peerMaxFrame))
	if n <= 0 {
		return 0
	}
	out.sendWin -= n
	q.send.sendWin -= n
	return int(n)
}

// waitCredit waits, the lock released meanwhile, until a WINDOW_UPDATE or
// SETTINGS may have given out credit, or the write deadline passes (an
// error, for stream id). The lock is held.
func (q *ctrlQueue) waitCredit(out *outbound, id uint32) error {
	dl := out.wdl
	if !dl.IsZero() && !time.Now().Before(dl) {
		return &deadlineError{"write", id}
	}
	out.wantCredit = true
	ch := wake(&out.wwake)
	q.mu.Unlock()
	wait(ch, dl)
	q.mu.Lock()
	out.wantCredit = false
	return nil
}

// setWriteDeadline sets out's write deadline, for the writer already
// waiting too.
func (q *ctrlQueue) setWriteDeadline(out *outbound, t time.Time) {
	q.mu.Lock()
	out.wdl = t
	poke(out.wwake)
	q.mu.Unlock()
}

// credit adds a WINDOW_UPDATE's increment to out's window; false when it
// would pass 2^31-1 (§6.9.1). The lock is held.
func (q *ctrlQueue) credit(out *outbound, inc int64) bool {
	if out.sendWin+inc > maxWindow {
		return false
	}
	out.sendWin += inc
	poke(out.wwake)
	return true
}

// creditConn adds a WINDOW_UPDATE's increment to the connection's window;
// false when it would pass 2^31-1. The caller wakes the writers waiting.
// The lock is held.
func (q *ctrlQueue) creditConn(inc int64) bool {
	if q.send.sendWin+inc > maxWindow {
		return false
	}
	q.send.sendWin += inc
	return true
}

// resize applies to out the change, delta, of the peer's
// SETTINGS_INITIAL_WINDOW_SIZE: the window may go negative, and must not
// pass 2^31-1 (§6.9.2). The lock is held.
func (q *ctrlQueue) resize(out *outbound, delta int64) bool {
	out.sendWin += delta
	if out.sendWin > maxWindow {
		return false
	}
	if delta > 0 {
		poke(out.wwake)
	}
	return true
}
