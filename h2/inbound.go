package h2

import (
	"io"
	"time"
)

// inbound is the receiving half of a stream, a Stream's request body or a
// ClientStream's response body, guarded by its connection's lock: the DATA
// payloads received and not yet read, the stream's receive window, and
// the reader waiting for more.
//
// Each byte received goes back to the peer's windows once: as it is read
// (receiver.consumed), or when its stream closes (receiver.close), after
// which reading what is left, where it is kept, gives nothing back again.
type inbound struct {
	buf      []byte // received, not yet read
	off      int
	received int64
	recvWin  int64 // what the peer may still send on this stream
	unacked  int64 // read, not yet given back
	err      error // why it closed, when not normally
	rdl      time.Time
	// rwake is poked when what a blocked Read waits for may have
	// changed; made by the first Read that blocks (most streams never
	// do), so a poke before that finds nil and does nothing.
	rwake chan struct{}
	// Last, packed together: a Stream is allocated per stream, and its
	// size class is what counts.
	id          uint32
	remoteEnded bool // END_STREAM received: half-closed (remote)
	closed      bool
}

// buffered is how many bytes received are not yet read.
func (in *inbound) buffered() int { return len(in.buf) - in.off }

// drop lets go of what was received and not read.
func (in *inbound) drop() { in.buf, in.off = nil, 0 }

// receiver is a connection's side of its streams' inbound halves, kept by
// both ends under the connection's lock beside the frames owed (ctrlQueue):
// the connection's receive window and the credit given back in batches, a
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

// consumed gives back n bytes of in read or dropped: the connection's
// window, and the stream's while the peer may still send on it. A closed
// stream's bytes went back when it closed. The lock is held.
func (q *ctrlQueue) consumed(in *inbound, n int64) {
	if in.closed {
		return
	}
	q.returnConn(n)
	if in.remoteEnded {
		return
	}
	in.unacked += n
	if in.unacked >= q.recv.streamBatch {
		q.queue = append(q.queue, ctrl{kind: cWindow, id: in.id, val: uint32(in.unacked)})
		in.recvWin += in.unacked
		in.unacked = 0
	}
}

// closeInbound closes in for err (nil: both sides ended): what it holds
// unread goes back to the connection's window, and is dropped unless keep
// (the stream ended normally, or the peer's side of it did: a response
// complete before the reset is read whole). The lock is held.
func (q *ctrlQueue) closeInbound(in *inbound, err error, keep bool) {
	if n := int64(in.buffered()); n > 0 {
		q.returnConn(n)
	}
	in.closed, in.err = true, err
	if err != nil && !keep {
		in.drop()
	}
	poke(in.rwake)
}

// read is a stream's Read: what was received, else io.EOF after
// END_STREAM, the stream's error once it closed, or a wait for more until
// the read deadline. The credit read goes back through w.
func (q *ctrlQueue) read(in *inbound, p []byte, w writeSide) (int, error) {
	q.mu.Lock()
	for {
		if in.off < len(in.buf) {
			n := copy(p, in.buf[in.off:])
			in.off += n
			if in.off == len(in.buf) {
				in.buf, in.off = in.buf[:0], 0
				if cap(in.buf) > 64<<10 {
					in.buf = nil
				}
			}
			q.consumed(in, int64(n))
			q.mu.Unlock()
			q.startFlush(w)
			return n, nil
		}
		if in.remoteEnded {
			q.mu.Unlock()
			return 0, io.EOF
		}
		if in.err != nil {
			err := in.err
			q.mu.Unlock()
			return 0, err
		}
		if len(p) == 0 {
			q.mu.Unlock()
			return 0, nil
		}
		dl := in.rdl
		if !dl.IsZero() && !time.Now().Before(dl) {
			q.mu.Unlock()
			return 0, &deadlineError{"read", in.id}
		}
		ch := wake(&in.rwake)
		q.mu.Unlock()
		wait(ch, dl)
		q.mu.Lock()
	}
}

// setReadDeadline sets in's read deadline, for the reads already waiting
// too.
func (q *ctrlQueue) setReadDeadline(in *inbound, t time.Time) {
	q.mu.Lock()
	in.rdl = t
	poke(in.rwake)
	q.mu.Unlock()
}
