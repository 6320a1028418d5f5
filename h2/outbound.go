package h2

// The sending half of a stream (stream's send window, wdl, wwake), and the
// connection's side of it: the send windows and what the peer's SETTINGS
// allow.

// sender is a connection's side of its streams' sending halves, kept under
// the connection's lock: the connection's send window and what the peer's
// SETTINGS allow.
type sender struct {
	sendWin      int64  // connection send window
	peerWindow   int64  // the peer's SETTINGS_INITIAL_WINDOW_SIZE, each new stream's send window
	peerMaxFrame uint32 // the peer's SETTINGS_MAX_FRAME_SIZE
}

func newSender() sender {
	return sender{sendWin: defaultWindow, peerWindow: defaultWindow, peerMaxFrame: defaultMaxFrame}
}

// take takes up to want bytes of send credit for st, no more than a
// frame, from the stream's and the connection's windows: 0 when there is
// none. The lock is held.
func (q *ctrlQueue) take(st *stream, want int) int {
	n := min(int64(want), st.sendWin, q.send.sendWin, int64(q.send.peerMaxFrame))
	if n <= 0 {
		return 0
	}
	st.sendWin -= n
	q.send.sendWin -= n
	return int(n)
}

// waitCredit waits, the lock released meanwhile, until a WINDOW_UPDATE or
// SETTINGS may have given out credit, or the write deadline passes (an
// error). The lock is held.
func (q *ctrlQueue) waitCredit(st *stream) error {
	st.wantCredit = true
	err := q.await(&st.wwake, st.wdl, "write", st.id)
	st.wantCredit = false
	return err
}

// credit adds a WINDOW_UPDATE's increment to st's window; false when it
// would pass 2^31-1 (§6.9.1). The lock is held.
func (q *ctrlQueue) credit(st *stream, inc int64) bool {
	if st.sendWin+inc > maxWindow {
		return false
	}
	st.sendWin += inc
	poke(st.wwake)
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

// resize applies to st the change, delta, of the peer's
// SETTINGS_INITIAL_WINDOW_SIZE: the window may go negative, and must not
// pass 2^31-1 (§6.9.2). The lock is held.
func (q *ctrlQueue) resize(st *stream, delta int64) bool {
	st.sendWin += delta
	if st.sendWin > maxWindow {
		return false
	}
	if delta > 0 {
		poke(st.wwake)
	}
	return true
}
