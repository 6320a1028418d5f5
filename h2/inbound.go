package h2

import (
	"io"
	"sync"
	"time"
)

// The receiving half of a stream (stream's first fields), and the
// connection's side of it: the DATA received and not read, the receive
// windows, and the credit given back in batches.

// buffered is how many bytes received are not yet read.
func (st *stream) buffered() int { return len(st.buf) - st.off }

// drop lets go of what was received and not read.
func (st *stream) drop() { st.retire() }

// A stream's DATA waits for its reader in a buffer of its own. Most
// streams get little (a response to a GET, a small request body), so
// their first buffer is a recycled one of spareBufSize: taken by the
// first DATA that fits, given back once the reader has it all and no more
// can come, or when what is left is dropped. A stream given more grows
// its buffer as append does, and that one is left to the collector.
const spareBufSize = 4 << 10

var spareBufs = sync.Pool{New: func() any { return new([spareBufSize]byte) }}

// take gives st, whose buffer is empty, a spare one for n bytes, if they
// fit. The lock is held.
func (st *stream) take(n int) {
	if st.buf == nil && n <= spareBufSize {
		st.buf = spareBufs.Get().(*[spareBufSize]byte)[:0]
	}
}

// retire lets go of st's buffer and what it holds unread, giving a spare
// one back. Nothing outside the lock keeps a slice of it: reads copy out.
// The lock is held.
func (st *stream) retire() {
	if cap(st.buf) == spareBufSize {
		spareBufs.Put((*[spareBufSize]byte)(st.buf[:spareBufSize]))
	}
	st.buf, st.off = nil, 0
}

// receiver is a connection's side of its streams' receiving halves, kept
// under the connection's lock beside the frames owed (ctrlQueue): the
// connection's receive window and the credit given back in batches, a
// WINDOW_UPDATE once half a window is consumed.
type receiver struct {
	recvWin     int64 // what the peer may still send on the connection
	recvUnacked int64 // consumed, not yet given back
	connBatch   int64 // half the connection's window
	streamBatch int64 // half a stream's window
}

func newReceiver(connWindow, streamWindow uint32) receiver {
	return receiver{recvWin: int64(connWindow), connBatch: int64(connWindow) / 2, streamBatch: int64(streamWindow) / 2}
}

// returnConn gives n bytes of connection window back, batched. The lock
// is held.
func (q *ctrlQueue) returnConn(n int64) {
	r := &q.recv
	r.recvUnacked += n
	if r.recvUnacked >= r.connBatch {
		q.queue = append(q.queue, ctrl{kind: cWindow, val: uint32(r.recvUnacked)})
		r.recvWin += r.recvUnacked
		r.recvUnacked = 0
	}
}

// consumed gives back n bytes of st read or dropped: the connection's
// window, and the stream's while the peer may still send on it. A closed
// stream's bytes went back when it closed. The lock is held.
func (q *ctrlQueue) consumed(st *stream, n int64) {
	if st.closed {
		return
	}
	q.returnConn(n)
	if st.remoteEnded {
		return
	}
	st.unacked += n
	if st.unacked >= q.recv.streamBatch {
		q.queue = append(q.queue, ctrl{kind: cWindow, id: st.id, val: uint32(st.unacked)})
		st.recvWin += st.unacked
		st.unacked = 0
	}
}

// closeInbound closes st's receiving half for err (nil: both sides
// ended): what it holds unread goes back to the connection's window, and
// is dropped unless keep (the stream ended normally, or the peer's side of
// it did: a response complete before the reset is read whole). The lock
// is held.
func (q *ctrlQueue) closeInbound(st *stream, err error, keep bool) {
	if n := int64(st.buffered()); n > 0 {
		q.returnConn(n)
	}
	st.closed, st.err = true, err
	if err != nil && !keep {
		st.drop()
	}
	poke(st.rwake)
}

// read is a stream's Read: what was received, else io.EOF after
// END_STREAM, the stream's error once it closed, or a wait for more until
// the read deadline. The credit read goes back at once.
func (c *core) read(st *stream, p []byte) (int, error) {
	q := &c.ctrlQueue
	q.mu.Lock()
	for {
		if st.off < len(st.buf) {
			n := copy(p, st.buf[st.off:])
			st.off += n
			if st.off == len(st.buf) {
				st.buf, st.off = st.buf[:0], 0
				if st.remoteEnded || st.closed || cap(st.buf) > 64<<10 {
					st.retire() // no more can come, or a large buffer
				}
			}
			q.consumed(st, int64(n))
			q.mu.Unlock()
			c.kick()
			return n, nil
		}
		if st.remoteEnded {
			st.retire()
			q.mu.Unlock()
			return 0, io.EOF
		}
		if st.err != nil {
			err := st.err
			q.mu.Unlock()
			return 0, err
		}
		if len(p) == 0 {
			q.mu.Unlock()
			return 0, nil
		}
		if err := q.waitRead(st); err != nil {
			q.mu.Unlock()
			return 0, err
		}
	}
}

// waitRead waits, the lock released meanwhile, until what st's reader
// waits for may have changed, or the read deadline passes (an error). The
// lock is held.
func (q *ctrlQueue) waitRead(st *stream) error {
	return q.await(&st.rwake, st.rdl, "read", st.id)
}

// await waits, the lock released meanwhile, until *ch (made if need be) is
// poked or the deadline dl (if any) passes; past it, it returns a deadline
// error for op on stream id at once. The lock is held.
func (q *ctrlQueue) await(ch *chan struct{}, dl time.Time, op string, id uint32) error {
	if !dl.IsZero() && !time.Now().Before(dl) {
		return &deadlineError{op, id}
	}
	w := wake(ch)
	if dl.IsZero() {
		q.mu.Unlock()
		<-w
		q.mu.Lock()
		return nil
	}
	t := q.timer(time.Until(dl))
	q.mu.Unlock()
	select {
	case <-w:
	case <-t.C:
	}
	q.mu.Lock()
	q.spare(t)
	return nil
}

// setDeadline sets *dl, a stream's read or write deadline, to t, and
// wakes the reader or writer waiting on *ch, which then waits for the new
// one. It returns nil, as a stream's SetReadDeadline does.
func (q *ctrlQueue) setDeadline(dl *time.Time, ch *chan struct{}, t time.Time) error {
	q.mu.Lock()
	*dl = t
	poke(*ch)
	q.mu.Unlock()
	return nil
}
