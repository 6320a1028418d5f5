package h2

import (
	"errors"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// stream is what both ends keep of a stream, embedded in a server's Stream
// and a client's ClientStream, and guarded by the connection's lock
// (core.mu): its receiving half (the DATA received and not yet read, the
// receive window, the reader waiting; inbound.go), its sending half (the
// send window, the writer waiting for credit; outbound.go), and its state
// (RFC 9113 §5.1). The core reads frames into it and writes frames from
// it, whichever end it is.
//
// Each request has one, in a Stream or ClientStream recycled once both
// its owner and the connection are done with it: the fields are ordered
// so that the flags pack behind the id, and the Stream stays within its
// size class (TestStructSizes).
type stream struct {
	// Receiving (inbound.go). Each byte received goes back to the peer's
	// windows once: as it is read (core.consumed), or when its stream
	// closes (core.closeInbound), after which reading what is left, where
	// it is kept, gives nothing back again.
	buf      []byte // received, not yet read
	off      int
	received int64
	recvWin  int64 // what the peer may still send on this stream
	unacked  int64 // read, not yet given back
	err      error // why the stream closed, when not normally
	rdl      time.Time
	// rwake is poked when what a blocked reader waits for may have
	// changed; made by the first read that blocks (most streams never
	// do), so a poke before that finds nil and does nothing.
	rwake chan struct{}

	// Sending (outbound.go).
	sendWin int64
	wdl     time.Time
	wwake   chan struct{} // as rwake, for a writer waiting for credit

	length   int64               // the peer's content-length, -1 when absent
	trailers []hpack.HeaderField // the peer's trailer fields
	done     chan struct{}       // made by Done, closed as the stream closes
	onAbort  func()              // see Stream.OnAbort

	id          uint32
	remoteEnded bool // END_STREAM received: half-closed (remote)
	closed      bool
	ended       bool // END_STREAM sent: half-closed (local)
	wantCredit  bool // a writer waits for credit
	sentHead    bool // our final header block sent (a client's request, at once): DATA may follow
	gotHead     bool // the peer's final header block came (a server's request, at once): DATA may follow
	answered    bool // a client's: a response header block, interim or final, came (NotProcessed)
	noContent   bool // the peer's message has no content (HEAD, 204, 304), whatever its content-length
}

// peer is an end's stream as the core keeps it, a *Stream or a
// *ClientStream: both have the stream they embed.
type peer interface{ base() *stream }

func (st *stream) base() *stream { return st }

var (
	errNoHeaders = errors.New("h2: DATA or trailers before the final header block")
	errInterim   = errors.New("h2: an informational (1xx) block cannot end the stream")
)

// writeErr says why st cannot be written, if it cannot. The lock is held.
func (st *stream) writeErr() error {
	switch {
	case st.err != nil:
		return st.err
	case st.ended, st.closed:
		return ErrStreamDone
	}
	return nil
}

// wake returns *ch, making it first. The lock is held.
func wake(ch *chan struct{}) chan struct{} {
	if *ch == nil {
		*ch = make(chan struct{}, 1)
	}
	return *ch
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// open readies st as stream id: its windows are the settings' of now. The
// lock is held.
func (c *core) open(st *stream, id uint32) {
	st.id = id
	st.recvWin = int64(c.initialWindow)
	st.sendWin = c.send.peerWindow
	st.length = -1
}

// doneOf is a stream's Done: a channel made on the first call (most
// streams end without anyone asking), closed as the stream closes.
func (c *core) doneOf(st *stream) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.done == nil {
		if st.closed {
			return closedDone
		}
		st.done = make(chan struct{})
	}
	return st.done
}

// closedDone is Done's channel for a stream that closed before it was
// asked for.
var closedDone = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// trailersOf returns the peer's trailer fields of st.
func (c *core) trailersOf(st *stream) []hpack.HeaderField {
	c.mu.Lock()
	defer c.mu.Unlock()
	return st.trailers
}

// write sends p as DATA of st, in frames within the peer's
// SETTINGS_MAX_FRAME_SIZE, END_STREAM on the last when last is set,
// blocking on the stream's and the connection's send windows until the
// write deadline. more tells that more of the stream follows p at once
// (see unlockWriteMore).
func (c *core) write(st *stream, p []byte, last, more bool) (int, error) {
	written := 0
	for len(p) > 0 {
		n, err := c.reserve(st, len(p), true)
		if err != nil {
			return written, err
		}
		wb, err := c.lockWrite()
		if err != nil {
			c.unreserve(st, n)
			return written, err
		}
		err = c.writeData(wb, st, p[:n], last && n == len(p), n)
		if uerr := c.unlock(false, more); err == nil {
			err = uerr
		}
		if err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// reserve takes up to want bytes of send credit for st, no more than a
// frame, from the stream's and the connection's windows. Unless block is
// set it returns 0 when there is none; otherwise it waits for credit until
// the write deadline.
func (c *core) reserve(st *stream, want int, block bool) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if err := st.writeErr(); err != nil {
			return 0, err
		}
		if !st.sentHead {
			return 0, errNoHeaders
		}
		if n := c.take(st, want); n > 0 || !block {
			return n, nil
		}
		if err := c.waitCredit(st); err != nil {
			return 0, err
		}
	}
}

// unreserve gives back credit taken for a frame not written.
func (c *core) unreserve(st *stream, n int) {
	c.mu.Lock()
	st.sendWin += int64(n)
	c.send.sendWin += int64(n)
	c.mu.Unlock()
}

// closeSend ends st's sending side with an empty DATA frame with
// END_STREAM (allowed with any window, §6.9.1), unless END_STREAM was sent.
// Once it was, it returns nil, or with failed the stream's error if the
// stream failed since.
func (c *core) closeSend(st *stream, failed bool) error {
	c.mu.Lock()
	done := st.ended && (!failed || st.err == nil)
	c.mu.Unlock()
	if done {
		return nil
	}
	wb, err := c.lockWrite()
	if err != nil {
		return err
	}
	c.mu.Lock()
	err = st.writeErr()
	if err == nil && !st.sentHead {
		err = errNoHeaders
	}
	c.mu.Unlock()
	if err == ErrStreamDone {
		err = nil
	} else if err == nil {
		err = c.writeData(wb, st, nil, true, 0)
	}
	if uerr := c.unlockWrite(false); err == nil {
		err = uerr
	}
	return err
}

// writeTrailers ends st's sending side with fields, already checked, in a
// header block with END_STREAM. size is their header list size, refused
// when over the peer's SETTINGS_MAX_HEADER_LIST_SIZE as a client keeps it.
func (c *core) writeTrailers(st *stream, fields []hpack.HeaderField, size uint64) error {
	wb, err := c.lockWrite()
	if err != nil {
		return err
	}
	c.mu.Lock()
	err = st.writeErr()
	switch {
	case err != nil:
	case !st.sentHead:
		err = errNoHeaders
	case c.peerMaxList != 0 && size > uint64(c.peerMaxList):
		err = errors.Join(ErrInvalidRequest, errors.New("h2: trailers over the server's header list limit"))
	}
	c.mu.Unlock()
	if err == nil {
		err = c.writeBlock(wb, st.id, fields, true)
		if err == nil {
			c.mu.Lock()
			c.endLocal(st)
			c.mu.Unlock()
		}
	}
	if uerr := c.unlockWrite(false); err == nil {
		err = uerr
	}
	return err
}

// reset sends RST_STREAM with code on st, once, unless the stream already
// closed; it reports whether it did. Later reads and writes fail with a
// *ResetError.
func (c *core) reset(st *stream, code http2.ErrCode) bool {
	c.mu.Lock()
	sent := c.resetLocked(st, code)
	c.mu.Unlock()
	if sent {
		c.kick()
	}
	return sent
}

// resetLocked is reset with the lock held; the caller kicks the writer
// when it reports that RST_STREAM was queued.
func (c *core) resetLocked(st *stream, code http2.ErrCode) bool {
	if st.closed {
		return false
	}
	c.queue = append(c.queue, ctrl{kind: cRST, id: st.id, val: uint32(code)})
	c.closeStream(st, &ResetError{StreamID: st.id, Code: code})
	return true
}

// endLocal notes END_STREAM sent: half-closed (local), or closed. The lock
// is held.
func (c *core) endLocal(st *stream) {
	st.ended = true
	if st.remoteEnded {
		c.closeStream(st, nil)
	}
}
