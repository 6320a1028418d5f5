package h2

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// ctrl is a frame queued for the next writer: what the read loop owes the
// peer, and what streams send without waiting (RST_STREAM,
// WINDOW_UPDATE).
type ctrl struct {
	kind ctrlKind
	id   uint32
	val  uint32 // error code, window increment, or status
	data [8]byte
}

type ctrlKind uint8

const (
	cSettings    ctrlKind = iota // the preface; val: a server's SETTINGS_MAX_CONCURRENT_STREAMS
	cSettingsAck                 // data[0]: 1 if the SETTINGS held SETTINGS_HEADER_TABLE_SIZE; val: its value, id: the smallest it held
	cPing                        // data
	cPingAck                     // data
	cRST                         // id, val: code
	cWindow                      // id, val: increment
	cGoAway                      // id: last stream, val: code; core.goAwayDebug
	cStatus                      // id, val: status of a response with no body, ending the stream
)

// writeBuf is what a writer needs while it holds the write lock: a buffered
// writer on the connection and a Framer writing into it. Both are borrowed
// from a pool while frames are pending and returned at the flush, so that an
// idle connection holds neither, and a Framer's write buffer, which grows to
// the largest frame it wrote, is shared.
type writeBuf struct {
	bw   *bufio.Writer
	fr   *http2.Framer
	dw   deadlineWriter // bw's writer: a pointer to it, in bw, allocates nothing
	hbuf []byte         // the header block being written (writeBlock)
}

const writeBufSize = 16 << 10

var writeBufs = sync.Pool{New: func() any {
	wb := &writeBuf{bw: bufio.NewWriterSize(nil, writeBufSize)}
	wb.fr = http2.NewFramer(wb.bw, nil)
	return wb
}}

// deadlineWriter bounds each write to nc by timeout (WriteTimeout, on
// either side), so that a peer that stops reading ends the connection
// instead of holding a writer, and through the write lock every other,
// forever. A zero timeout sets no deadline: the socket bounds its writes
// itself (boundWrites).
type deadlineWriter struct {
	nc      net.Conn
	timeout time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	if w.timeout > 0 {
		w.nc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
	return w.nc.Write(p)
}

// release hands wb back to the pool, holding nothing of its connection.
func (wb *writeBuf) release() {
	wb.bw.Reset(nil)
	wb.dw = deadlineWriter{}
	writeBufs.Put(wb)
}

// The write side, either end's: one write lock; a pooled buffered writer
// held only while frames are pending; flushes coalesced when another
// writer waits, or left to a goroutine that runs after the writers of the
// same round (uncork); and the frames the reader owes the peer queued for
// the next writer (ctrl.go).

// lockWrite takes the write lock and writes the queued frames. Every
// successful lockWrite must be followed by unlockWrite.
func (c *core) lockWrite() (*writeBuf, error) {
	c.waiting.Add(1)
	c.wmu.Lock()
	c.waiting.Add(-1)
	if c.werr != nil {
		err := c.werr
		c.wmu.Unlock()
		return nil, err
	}
	if c.wb == nil {
		c.wb = writeBufs.Get().(*writeBuf)
		c.wb.dw = deadlineWriter{c.nc, c.writeTimeout}
		c.wb.bw.Reset(&c.wb.dw)
	}
	if err := c.drain(); err != nil {
		c.failWrite(err)
		c.wmu.Unlock()
		return nil, c.werr
	}
	return c.wb, nil
}

// unlockWrite writes what was queued meanwhile and, unless another writer is
// about to take the lock (which will then flush for both) and force is not
// set, flushes; then it releases the lock.
//
// While other streams' writers are likely in the same round of the
// scheduler (a server's handlers answering together), the flush is left
// to a goroutine that runs after them (uncork), so that one write carries
// their frames instead of a write each. Frames wait no longer than that
// round, or than half a buffer.
func (c *core) unlockWrite(force bool) error { return c.unlock(force, false) }

// unlockWriteMore is unlockWrite for a writer whose stream goes on: a
// response head, or DATA, without END_STREAM. Its next frames are likely
// to follow at once (a proxied response's body after its head, a gRPC
// answer's trailers after its message), so the flush is left to uncork as
// while other writers run: a gRPC answer leaves in one write, not three.
func (c *core) unlockWriteMore() error { return c.unlock(false, true) }

func (c *core) unlock(force, more bool) error {
	err := c.werr
	if err == nil {
		err = c.drain()
	}
	if err == nil && !force && c.waiting.Load() == 0 && c.wb.bw.Buffered() < writeBufSize/2 && (more || c.end.busy()) {
		if c.uncorking.CompareAndSwap(false, true) {
			uncorkers.Go(c)
		}
		c.wmu.Unlock()
		return nil
	}
	if err == nil && (force || c.waiting.Load() == 0 || c.wb.bw.Buffered() >= writeBufSize/2) {
		err = c.wb.bw.Flush()
		if err == nil && (force || c.waiting.Load() == 0) {
			c.wb.release()
			c.wb = nil
		}
	}
	if err != nil {
		c.failWrite(err)
		err = c.werr
	}
	c.wmu.Unlock()
	return err
}

// uncork flushes what writers left buffered for it, once the goroutines
// runnable now (other writers, about to write) have had their turn.
func (c *core) uncork() {
	runtime.Gosched()
	c.uncorking.Store(false) // a writer from now on starts another
	c.flush()
}

// flush writes the queued frames and what is buffered, now.
func (c *core) flush() error {
	if _, err := c.lockWrite(); err != nil {
		return err
	}
	return c.unlockWrite(true)
}

// failWrite ends the connection after a failed write: what was being written
// is lost, so nothing more may be. The write lock is held.
func (c *core) failWrite(err error) {
	if c.werr != nil {
		return
	}
	c.werr = &closedError{err}
	if c.wb != nil {
		c.wb.release()
		c.wb = nil
	}
	c.log.Debug("h2: write failed", "remote", c.nc.RemoteAddr(), "err", err)
	c.mu.Lock()
	c.writeFailed = err
	c.mu.Unlock()
	c.nc.Close()
}

// drain writes the queued frames. The write lock is held.
func (c *core) drain() error {
	q := c.takeQueue()
	if q == nil {
		return nil
	}
	fr := c.wb.fr
	for i := range q {
		var err error
		switch x := &q[i]; x.kind {
		case cSettings:
			err = c.writePreface(x.val)
		case cSettingsAck:
			// The peer's decoder takes a new table size from our
			// acknowledgement on (RFC 9113 §6.5.3): the encoder
			// applies it here, so that the size updates open the
			// first block after it (RFC 7541 §4.2).
			if x.data[0] != 0 {
				c.henc.setLimit(x.id)
				c.henc.setLimit(x.val)
			}
			err = fr.WriteSettingsAck()
		case cPing, cPingAck:
			err = fr.WritePing(x.kind == cPingAck, x.data)
		case cRST:
			err = fr.WriteRSTStream(x.id, http2.ErrCode(x.val))
		case cWindow:
			err = fr.WriteWindowUpdate(x.id, x.val)
		case cGoAway:
			c.mu.Lock()
			debug := c.goAwayDebug
			c.mu.Unlock()
			err = fr.WriteGoAway(x.id, http2.ErrCode(x.val), []byte(debug))
		case cStatus:
			err = c.writeBlock(c.wb, x.id, []hpack.HeaderField{{Name: ":status", Value: itoa3(x.val)}}, true)
		}
		if err != nil {
			return err
		}
	}
	c.doneQueue(q)
	return nil
}

// writePreface writes our SETTINGS (§3.4), after the client connection
// preface on a client's connection; a server's carries maxStreams.
func (c *core) writePreface(maxStreams uint32) error {
	if c.client {
		if _, err := io.WriteString(c.wb.bw, http2.ClientPreface); err != nil {
			return err
		}
	}
	settings := [...]http2.Setting{
		{ID: http2.SettingEnablePush, Val: 0},
		{ID: http2.SettingMaxConcurrentStreams, Val: maxStreams},
		{ID: http2.SettingInitialWindowSize, Val: c.initialWindow},
		{ID: http2.SettingMaxFrameSize, Val: c.maxFrameSize},
		{ID: http2.SettingMaxHeaderListSize, Val: c.maxHeaderList},
	}
	s := settings[:]
	if maxStreams == 0 { // none: no limit on the streams a server may open
		s = append(s[:1], s[2:]...)
	}
	return c.wb.fr.WriteSettings(s...)
}

func itoa3(v uint32) string {
	return string([]byte{byte('0' + v/100%10), byte('0' + v/10%10), byte('0' + v%10)})
}

// writeBlock encodes fields and writes them as HEADERS and CONTINUATION
// frames within the peer's SETTINGS_MAX_FRAME_SIZE. The write lock is
// held from the first frame to the last, so no other frame comes between
// (§4.3), and the encoder's state follows the order blocks are written in.
func (c *core) writeBlock(wb *writeBuf, id uint32, fields []hpack.HeaderField, end bool) error {
	c.mu.Lock()
	maxFrame := int(c.send.peerMaxFrame)
	c.mu.Unlock()
	wb.hbuf = c.henc.encode(wb.hbuf[:0], fields)
	err := writeFragments(wb.fr, id, wb.hbuf, end, maxFrame)
	if cap(wb.hbuf) > 4096 {
		wb.hbuf = nil
	}
	return err
}

// writeFragments writes block as a HEADERS frame and as many CONTINUATION
// frames as it takes, each of at most maxFrame bytes.
func writeFragments(fr *http2.Framer, id uint32, block []byte, end bool, maxFrame int) error {
	first := true
	for first || len(block) > 0 {
		n := min(len(block), maxFrame)
		frag := block[:n]
		block = block[n:]
		var err error
		if first {
			err = fr.WriteHeaders(http2.HeadersFrameParam{
				StreamID: id, BlockFragment: frag, EndStream: end, EndHeaders: len(block) == 0,
			})
			first = false
		} else {
			err = fr.WriteContinuation(id, len(block) == 0, frag)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writeData writes one DATA frame of st, for which credit bytes of send
// window were reserved. The write lock is held. The stream's state is
// checked again here, under the lock, so that no DATA follows our
// RST_STREAM; the credit of a frame not written goes back to the
// connection.
func (c *core) writeData(wb *writeBuf, st *stream, p []byte, end bool, credit int) error {
	c.mu.Lock()
	err := st.writeErr()
	if err != nil {
		c.send.sendWin += int64(credit)
	} else {
		c.glitches.give(glitchPerWork)
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := wb.fr.WriteData(st.id, end, p); err != nil {
		return err
	}
	if end {
		c.mu.Lock()
		c.endLocal(st)
		c.mu.Unlock()
	}
	return nil
}
