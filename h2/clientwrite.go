package h2

import (
	"io"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The client's write side follows the server's (write.go): one write lock,
// a pooled buffered writer held only while frames are pending, flushes
// coalesced when another writer waits, and the frames the reader owes the
// server queued for the next writer.

// lockWrite takes the write lock and writes the queued frames. Every
// successful lockWrite must be followed by unlockWrite.
func (cc *ClientConn) lockWrite() (*writeBuf, error) {
	cc.waiting.Add(1)
	cc.wmu.Lock()
	cc.waiting.Add(-1)
	if cc.werr != nil {
		err := cc.werr
		cc.wmu.Unlock()
		return nil, err
	}
	if cc.wb == nil {
		cc.wb = writeBufs.Get().(*writeBuf)
		cc.wb.dw = deadlineWriter{cc.nc, cc.s.WriteTimeout}
		cc.wb.bw.Reset(&cc.wb.dw)
	}
	if err := cc.drain(); err != nil {
		cc.failWrite(err)
		cc.wmu.Unlock()
		return nil, cc.werr
	}
	return cc.wb, nil
}

// unlockWrite writes what was queued meanwhile, flushes unless another
// writer is about to (and force is not set), and releases the lock.
func (cc *ClientConn) unlockWrite(force bool) error {
	err := cc.werr
	if err == nil {
		err = cc.drain()
	}
	if err == nil && (force || cc.waiting.Load() == 0 || cc.wb.bw.Buffered() >= writeBufSize/2) {
		err = cc.wb.bw.Flush()
		if err == nil && (force || cc.waiting.Load() == 0) {
			cc.wb.release()
			cc.wb = nil
		}
	}
	if err != nil {
		cc.failWrite(err)
		err = cc.werr
	}
	cc.wmu.Unlock()
	return err
}

// failWrite ends the connection after a failed write: what was being
// written is lost, so nothing more may be. The write lock is held.
func (cc *ClientConn) failWrite(err error) {
	if cc.werr != nil {
		return
	}
	cc.werr = &closedError{err}
	if cc.wb != nil {
		cc.wb.release()
		cc.wb = nil
	}
	cc.log.Debug("h2: upstream write failed", "remote", cc.nc.RemoteAddr(), "err", err)
	cc.mu.Lock()
	cc.writeFailed = err
	cc.mu.Unlock()
	cc.nc.Close()
}

// drain writes the queued frames. The write lock is held.
func (cc *ClientConn) drain() error {
	q := cc.takeQueue()
	if q == nil {
		return nil
	}
	fr := cc.wb.fr
	for i := range q {
		x := &q[i]
		done, err := writeCtrl(fr, x)
		if !done {
			switch x.kind {
			case cSettings: // the client preface (§3.4)
				if _, err = io.WriteString(cc.wb.bw, http2.ClientPreface); err != nil {
					break
				}
				err = fr.WriteSettings(
					http2.Setting{ID: http2.SettingEnablePush, Val: 0},
					http2.Setting{ID: http2.SettingInitialWindowSize, Val: cc.s.InitialWindow},
					http2.Setting{ID: http2.SettingMaxFrameSize, Val: cc.s.MaxFrameSize},
					http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: cc.s.MaxHeaderList},
				)
			case cGoAway:
				cc.mu.Lock()
				debug := cc.goAwayDebug
				cc.mu.Unlock()
				err = fr.WriteGoAway(0, http2.ErrCode(x.val), []byte(debug))
			}
		}
		if err != nil {
			return err
		}
	}
	cc.doneQueue(q)
	return nil
}

// writeBlock encodes fields and writes them as HEADERS and CONTINUATION
// frames within the server's SETTINGS_MAX_FRAME_SIZE, all under the write
// lock, so no other frame comes between (§4.3) and the encoder's state
// follows the order blocks are written in.
func (cc *ClientConn) writeBlock(wb *writeBuf, id uint32, fields []hpack.HeaderField, end bool) error {
	cc.mu.Lock()
	maxFrame := int(cc.send.peerMaxFrame)
	table, tableSet := cc.peerTable, cc.peerTableSet
	cc.peerTableSet = false
	cc.mu.Unlock()
	return cc.henc.write(wb.fr, id, fields, end, maxFrame, table, tableSet)
}

// writeData writes one DATA frame of cs, for which credit bytes of send
// window were reserved. The write lock is held. The stream's state is
// checked again under the lock, so that no DATA follows our RST_STREAM;
// the credit of a frame not written goes back.
func (cc *ClientConn) writeData(wb *writeBuf, cs *ClientStream, p []byte, end bool, credit int) error {
	cc.mu.Lock()
	err := cs.writeErr()
	if err != nil {
		cc.send.sendWin += int64(credit)
	} else {
		cc.glitches.give(cc.lim.glitchPerWork)
	}
	cc.mu.Unlock()
	if err != nil {
		return err
	}
	if err := wb.fr.WriteData(cs.id, end, p); err != nil {
		return err
	}
	if end {
		cc.mu.Lock()
		cc.endLocal(cs)
		cc.mu.Unlock()
	}
	return nil
}

// kick makes sure the queued frames get written: if no flusher runs, one
// is started.
func (cc *ClientConn) kick() { cc.startFlush(cc) }

// timedOut: a client connection's reads time out only to end it.
func (cc *ClientConn) timedOut(bool) onTimeout { return failRead }
