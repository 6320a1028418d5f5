package h2

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/internal/sock"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// core is one end of an HTTP/2 connection, what the server (Conn) and the
// client (ClientConn) share and embed: the reading of frames and their
// dispatch, SETTINGS, PING, WINDOW_UPDATE, RST_STREAM and DATA, flow
// control both ways, the reassembly of header blocks (headers.go), the
// streams and the memory of those recently closed, and the write path with
// its batching (write.go). Each end brings what its role gives meaning to
// through endpoint: header blocks, GOAWAY, which stream ids are idle, what
// happens when the last stream closes.
//
// The fields after ctrlQueue are guarded by its lock; the read side's are
// owned by the goroutine that reads frames; the write side's by the write
// lock.
type core struct {
	nc     net.Conn
	end    endpoint
	log    *slog.Logger
	client bool // the client end: it sends the connection preface, the server is the peer

	// Settings, defaults applied.
	initialWindow uint32 // each stream's receive window
	maxHeaderList uint32
	maxFrameSize  uint32 // the largest frame read
	writeTimeout  time.Duration

	// Owned by the goroutine reading frames.
	rd      connReader
	fr      *http2.Framer
	dec     *hpack.Decoder
	blk     headerBlock
	bigRead bool // fr holds a large read buffer: a server renews it once idle

	// The lock over what follows, the frames owed to the peer and the
	// windows (ctrl.go).
	ctrlQueue

	streams       map[uint32]peer // open and half-closed streams (§5.1)
	recent        [recentLen]closedStream
	recentAt      uint8
	sawSettings   bool   // the peer's first SETTINGS came
	settingsAcked bool   // the peer acknowledged ours
	goAway        bool   // our last GOAWAY is queued
	shutdown      bool   // Shutdown called
	closed        bool   // the connection ended
	userClosed    bool   // by Close
	lastID        uint32 // the last stream id our GOAWAY names: a server's last stream handed to a handler
	peerMaxList   uint32 // a client's: the server's SETTINGS_MAX_HEADER_LIST_SIZE, 0: none
	peerStreams   uint32 // the peer's SETTINGS_MAX_CONCURRENT_STREAMS as a client keeps it
	goAwayDebug   string // what our GOAWAY carries as debug data
	writeFailed   error  // why a write to the connection failed

	// Write side; see write.go. uncorking is set while an uncork
	// goroutine is on its way to flush what writers left buffered.
	waiting   atomic.Int32
	uncorking atomic.Bool
	wmu       sync.Mutex
	wb        *writeBuf
	henc      headerEncoder // the write lock guards it
	werr      error
}

// endpoint is what differs between the two ends of a connection; the core
// calls it as it reads frames and as streams close. Conn and ClientConn
// implement it.
type endpoint interface {
	// onHeaders begins reading a header block: a request's or its
	// trailers to a server, a response's to a client.
	onHeaders(f *http2.HeadersFrame) error
	// onGoAway takes the peer's GOAWAY.
	onGoAway(f *http2.GoAwayFrame) error
	// field checks a field of the header block being read (core.blk), as
	// the decoder emits it; false drops it, the block being malformed.
	field(f hpack.HeaderField) bool
	// endBlock acts on the header block read, whole and decoded.
	endBlock() error
	// idle reports whether id names a stream in the idle state (§5.1),
	// one that was never opened. The lock is held.
	idle(id uint32) bool
	// pingAck takes the acknowledgement of a PING.
	pingAck(data [8]byte) error
	// peerReset is told, before it closes, that the peer reset st; an
	// error ends the connection. The lock is held.
	peerReset(st *stream) error
	// lastClosed is told that no stream is open any more. The lock is
	// held.
	lastClosed()
	// busy reports whether other writers are likely to write within the
	// same round of the scheduler (see unlock).
	busy() bool
	// timedOut decides what a read from the connection that timed out is
	// to do (see connReader); begun tells whether bytes of a frame came.
	timedOut(begun bool) onTimeout
}

// config is what both ends' settings have alike, defaults applied by
// defaults.
type config struct {
	initialWindow, connWindow, maxHeaderList, maxFrameSize uint32
	writeTimeout                                           time.Duration
	log                                                    *slog.Logger
}

const (
	maxWindow       = 1<<31 - 1 // §6.9.1
	defaultWindow   = 65535     // §6.9.2, before SETTINGS
	defaultMaxFrame = 16384     // §4.2
	goAwayLinger    = time.Second
	maxStreamID     = 1<<31 - 1

	// Abuse bounds (reference §3 gives what peers use); not settings.
	glitchBurst, glitchRate = 5000, 500 // frames that ask work and carry none
	glitchPerWork           = 4         // given back per stream opened or DATA frame sent
	maxQueued               = 8192      // answers queued while the peer does not read; past glitchBurst, so that a peer that reads gets the GOAWAY of the glitch budget first
)

// defaults applies the defaults both ends document: a stream window of 1
// MiB, at least minWindow; a connection window of max(2×stream window,
// 1 MiB); a 64 KiB header list; 16 KiB frames; a 30 s write timeout; no
// log. Windows are at most 2^31-1, frames within 16384 to 2^24-1.
func (d config) defaults(minWindow uint32) config {
	if d.initialWindow == 0 {
		d.initialWindow = 1 << 20
	}
	d.initialWindow = min(max(d.initialWindow, minWindow), maxWindow)
	if d.connWindow == 0 {
		d.connWindow = uint32(max(min(2*uint64(d.initialWindow), maxWindow), 1<<20))
	}
	d.connWindow = max(min(d.connWindow, maxWindow), defaultWindow)
	if d.maxHeaderList == 0 {
		d.maxHeaderList = 64 << 10
	}
	if d.maxFrameSize == 0 {
		d.maxFrameSize = defaultMaxFrame
	}
	d.maxFrameSize = min(max(d.maxFrameSize, defaultMaxFrame), 1<<24-1)
	if d.writeTimeout <= 0 {
		d.writeTimeout = 30 * time.Second
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	return d
}

// init readies c, embedded in end, to speak on nc with the settings of
// cfg, defaults applied; prefix holds bytes already read from nc. It queues
// our SETTINGS first (with maxStreams, a server's
// SETTINGS_MAX_CONCURRENT_STREAMS; 0, a client's: none, and the client
// preface before), then the connection's WINDOW_UPDATE.
func (c *core) init(end endpoint, client bool, nc net.Conn, prefix []byte, cfg config, maxStreams uint32) {
	// Every frame is a read or a write: made unseen by the scheduler
	// (sock.Conn).
	nc = sock.Wrap(nc)
	c.nc, c.end, c.client, c.log = nc, end, client, cfg.log
	c.initialWindow, c.maxHeaderList, c.maxFrameSize, c.writeTimeout = cfg.initialWindow, cfg.maxHeaderList, cfg.maxFrameSize, cfg.writeTimeout
	if boundWrites(nc, cfg.writeTimeout) {
		c.writeTimeout = 0 // the socket bounds each write itself
	}
	c.rd = newConnReader(c, nc, prefix)
	c.send = newSender()
	c.recv = newReceiver(cfg.connWindow, cfg.initialWindow)
	c.glitches = newBudget(glitchBurst, glitchRate)
	// The preface (§3.4) goes first in the queue, so that nothing queued
	// early (a Shutdown) can precede it.
	c.queue = append(c.queue, ctrl{kind: cSettings, val: maxStreams})
	if cfg.connWindow > defaultWindow {
		c.queue = append(c.queue, ctrl{kind: cWindow, val: cfg.connWindow - defaultWindow})
	}
}

// boundWrites gives the socket under nc (under TLS too) the write
// timeout d, when it can bound each write itself from the moment the
// write has to wait (sock.Conn), and reports whether it could. A deadline
// set before each write instead cost a clock read and a change of the
// runtime's timer for each flush, most of which never wait.
func boundWrites(nc net.Conn, d time.Duration) bool {
	if tc, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = tc.NetConn()
	}
	wt, ok := nc.(interface{ SetWriteTimeout(time.Duration) })
	if ok {
		wt.SetWriteTimeout(d)
	}
	return ok
}

// startReading makes the HPACK decoder and the Framer, before the first
// frame is read.
func (c *core) startReading() {
	c.dec = hpack.NewDecoder(4096, c.onField)
	c.dec.SetMaxStringLength(int(c.maxHeaderList))
	c.fr = c.newReadFramer()
}

func (c *core) newReadFramer() *http2.Framer {
	fr := http2.NewFramer(nil, &c.rd)
	fr.SetMaxReadFrameSize(c.maxFrameSize)
	// Each frame is done with before the next is read (DATA is copied
	// into its stream): one DataFrame serves them all.
	fr.SetReuseFrames()
	return fr
}

// maxBlockFrames bounds the frames of one header block: enough for twice
// the header list limit in 1 KiB fragments.
func (c *core) maxBlockFrames() int { return int(2*uint64(c.maxHeaderList)/1024) + 2 }

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// next reads and processes one frame, and answers a stream error with
// RST_STREAM. It returns a connErr for a connection error, ErrIdle when the
// read returned for the connection to park, and read errors as they are.
func (c *core) next() error {
	err := c.readFrame()
	if se, ok := err.(streamErr); ok {
		if ce := c.resetByEngine(se); ce != nil {
			return *ce
		}
		return nil
	}
	return err
}

// readFrame reads and processes one frame. It returns a streamErr or
// connErr for protocol errors, and read errors as they are.
func (c *core) readFrame() error {
	c.rd.begin()
	fh, err := c.fr.ReadFrameHeader()
	if err != nil {
		if c.rd.parked {
			c.rd.parked = false
			return ErrIdle
		}
		if c.rd.err != nil {
			return c.rd.err
		}
		if err == http2.ErrFrameTooLarge {
			return connErr{http2.ErrCodeFrameSize, "frame too large"} // §4.2
		}
		return frameError(c.fr, err, fh)
	}
	if fh.Length > 4096 {
		c.bigRead = true
	}
	f, err := c.fr.ReadFrameForHeader(fh)
	if err != nil {
		if c.rd.err != nil {
			return c.rd.err
		}
		return frameError(c.fr, err, fh)
	}
	if !c.sawSettings {
		// §3.4: each preface goes on with a SETTINGS frame.
		if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
			return connErr{http2.ErrCodeProtocol, "first frame is not SETTINGS"}
		}
	}
	return c.process(f)
}

// frameError converts what fr says about a frame it would not parse into a
// connErr or a streamErr.
func frameError(fr *http2.Framer, err error, fh http2.FrameHeader) error {
	reason := "malformed " + fh.Type.String() + " frame"
	if d := fr.ErrorDetail(); d != nil {
		reason = d.Error()
	}
	var ce http2.ConnectionError
	var se http2.StreamError
	switch {
	case errors.As(err, &ce):
		return connErr{http2.ErrCode(ce), reason}
	case errors.As(err, &se):
		if fh.Type == http2.FrameHeaders {
			// Its header block was not decoded: the HPACK state is lost.
			return connErr{se.Code, reason}
		}
		return streamErr{se.StreamID, se.Code, reason}
	}
	// What remains is a payload too short for its mandatory fields (§4.2).
	return connErr{http2.ErrCodeFrameSize, reason}
}

func (c *core) process(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.ContinuationFrame:
		return c.feed(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		return c.onPing(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.HeadersFrame:
		return c.end.onHeaders(f)
	case *http2.GoAwayFrame:
		return c.end.onGoAway(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID && !c.client { // §5.3.1
			return streamErr{f.StreamID, http2.ErrCodeProtocol, "stream depends on itself"}
		}
		return c.glitch(1) // §5.3.2: deprecated, ignored
	case *http2.PushPromiseFrame:
		if c.client {
			return connErr{http2.ErrCodeProtocol, "PUSH_PROMISE with push disabled"} // we sent SETTINGS_ENABLE_PUSH 0
		}
		return connErr{http2.ErrCodeProtocol, "PUSH_PROMISE from a client"} // §8.4
	}
	return c.glitch(1) // §4.1, §5.5: unknown frame types are ignored
}

func (c *core) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		c.mu.Lock()
		c.settingsAcked = true
		c.mu.Unlock()
		return nil
	}
	if err := c.glitch(1); err != nil {
		return err
	}
	c.mu.Lock()
	first := !c.sawSettings
	c.sawSettings = true
	sawMax := false
	ack := ctrl{kind: cSettingsAck} // with the table sizes for the encoder
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingEnablePush:
			if s.Val != 0 && c.client { // §6.5.2: a server MUST NOT send 1
				return connErr{http2.ErrCodeProtocol, "SETTINGS_ENABLE_PUSH from a server"}
			}
		case http2.SettingMaxConcurrentStreams:
			c.peerStreams, sawMax = s.Val, true
		case http2.SettingHeaderTableSize:
			if ack.data[0] == 0 || s.Val < ack.id {
				ack.id = s.Val
			}
			ack.val, ack.data[0] = s.Val, 1
		case http2.SettingInitialWindowSize:
			// §6.9.2: the change applies to every open stream's window,
			// which may go negative, and must not pass 2^31-1.
			delta := int64(s.Val) - c.send.peerWindow
			c.send.peerWindow = int64(s.Val)
			for _, p := range c.streams {
				if !c.resize(p.base(), delta) {
					return connErr{http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a window"}
				}
			}
		case http2.SettingMaxFrameSize:
			c.send.peerMaxFrame = s.Val
		case http2.SettingMaxHeaderListSize:
			if c.client { // a server's responses are not held to it
				c.peerMaxList = s.Val
			}
		}
		return nil
	})
	if first && !sawMax {
		// §6.5.2: no limit; see unlimitedStreams.
		c.peerStreams = unlimitedStreams
	}
	c.mu.Unlock()
	var ie connErr
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &ie):
		return ie
	case errors.As(err, &ce):
		return connErr{http2.ErrCode(ce), "invalid SETTINGS value"}
	case err != nil:
		return connErr{http2.ErrCodeProtocol, "invalid SETTINGS"}
	}
	return c.answer(ack)
}

func (c *core) onPing(f *http2.PingFrame) error {
	if f.IsAck() {
		return c.end.pingAck(f.Data)
	}
	if err := c.glitch(1); err != nil {
		return err
	}
	return c.answer(ctrl{kind: cPingAck, data: f.Data})
}

func (c *core) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	if err := c.glitch(1); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		if !c.creditConn(inc) { // §6.9.1
			return connErr{http2.ErrCodeFlowControl, "connection window over 2^31-1"}
		}
		for _, p := range c.streams {
			if st := p.base(); st.wantCredit {
				poke(st.wwake)
			}
		}
		return nil
	}
	if c.end.idle(f.StreamID) {
		return connErr{http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream"} // §5.1
	}
	p := c.streams[f.StreamID]
	if p == nil {
		return nil // §5.1: may arrive after the stream closed
	}
	if st := p.base(); !c.credit(st, inc) {
		return streamErr{st.id, http2.ErrCodeFlowControl, "stream window over 2^31-1"}
	}
	return nil
}

func (c *core) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end.idle(f.StreamID) {
		return connErr{http2.ErrCodeProtocol, "RST_STREAM on an idle stream"} // §6.4
	}
	p := c.streams[f.StreamID]
	if p == nil {
		return nil
	}
	st := p.base()
	if err := c.end.peerReset(st); err != nil {
		return err
	}
	c.closeStream(st, &ResetError{StreamID: st.id, Code: f.ErrCode, Remote: true, answered: st.answered})
	return nil
}

func (c *core) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Length)
	data := f.Data()
	if len(data) == 0 && !f.StreamEnded() {
		if err := c.glitch(1); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// §6.9: every DATA counts against the connection window, whatever its
	// stream's state, and padding counts too.
	if n > c.recv.recvWin {
		return connErr{http2.ErrCodeFlowControl, "connection window exceeded"}
	}
	c.recv.recvWin -= n
	if c.end.idle(id) {
		return connErr{http2.ErrCodeProtocol, "DATA on an idle stream"} // §5.1
	}
	p := c.streams[id]
	if p == nil {
		c.returnConn(n)
		switch c.closedBy(id) {
		case closedByUs:
			return nil // §5.1: frames in flight when we reset it
		case closedUnknown:
			if c.client {
				// A client resets streams by the hundred (every request
				// given up on): one it no longer remembers is likelier
				// one it reset than one that ended.
				return nil
			}
		}
		return streamErr{id, http2.ErrCodeStreamClosed, "DATA on a closed stream"} // §6.1
	}
	st := p.base()
	if st.remoteEnded {
		c.returnConn(n)
		return streamErr{id, http2.ErrCodeStreamClosed, "DATA after END_STREAM"} // §5.1: half-closed (remote)
	}
	if n > st.recvWin {
		c.returnConn(n)
		return streamErr{id, http2.ErrCodeFlowControl, "stream window exceeded"} // §6.9.1
	}
	st.recvWin -= n
	if pad := n - int64(len(data)); pad > 0 {
		c.consumed(st, pad)
	}
	if !st.gotHead {
		c.returnConn(int64(len(data)))
		return streamErr{id, http2.ErrCodeProtocol, "DATA before the final response header block"} // §8.1
	}
	st.received += int64(len(data))
	switch {
	case st.noContent && len(data) > 0:
		// RFC 9110 §6.4.1: HEAD, 204 and 304 responses have no content.
		c.returnConn(int64(len(data)))
		return streamErr{id, http2.ErrCodeProtocol, "content in a response that has none"}
	case st.length >= 0 && st.received > st.length:
		c.returnConn(int64(len(data)))
		return streamErr{id, http2.ErrCodeProtocol, "DATA beyond content-length"} // §8.1.1
	}
	if len(data) > 0 {
		st.take(len(data))
		st.buf = append(st.buf, data...)
		poke(st.rwake)
	}
	if f.StreamEnded() {
		return c.remoteEnd(st)
	}
	return nil
}

// remoteEnd moves st to half-closed (remote), or closed. The lock is held.
func (c *core) remoteEnd(st *stream) error {
	if !st.noContent && st.length >= 0 && st.received != st.length {
		return streamErr{st.id, http2.ErrCodeProtocol, "DATA shorter than content-length"} // §8.1.1
	}
	st.remoteEnded = true
	poke(st.rwake)
	if st.ended {
		c.closeStream(st, nil)
	}
	return nil
}

// resetByEngine answers a stream error with RST_STREAM (§5.4.2); the
// stream's methods then fail with a *ResetError carrying the reason. A
// stream error on an idle stream becomes a connection error: RST_STREAM
// must not be sent on an idle stream (§5.1). So does an error when the
// answers owed have piled up.
func (c *core) resetByEngine(e streamErr) *connErr {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end.idle(e.id) {
		return &connErr{e.code, "stream error on an idle stream"}
	}
	if p := c.streams[e.id]; p != nil {
		c.closeStream(p.base(), &ResetError{StreamID: e.id, Code: e.code, Reason: e.reason})
	} else {
		c.remember(e.id, closedByUs)
	}
	c.queue = append(c.queue, ctrl{kind: cRST, id: e.id, val: uint32(e.code)})
	if len(c.queue) > maxQueued {
		return &connErr{http2.ErrCodeEnhanceYourCalm, "too many queued frames"}
	}
	return nil
}

// closeStream moves st to closed (§5.1) for err: nil when both sides
// ended, the reason otherwise. Its reader and writer, if waiting, wake
// to it; Done closes, an OnAbort function runs. What was buffered and not
// read goes back to the connection's window now, so that a stream nobody
// reads to its end cannot shrink it for the others; a client keeps it
// readable when the response had ended (an early response, §8.1), a
// server drops it (a handler does not read a request body after a
// reset). The lock is held.
func (c *core) closeStream(st *stream, err error) {
	if st.closed {
		return
	}
	c.closeInbound(st, err, c.client && st.remoteEnded)
	delete(c.streams, st.id)
	by := closedNormally
	if re, ok := err.(*ResetError); ok && !re.Remote || err == ErrConnClosed {
		by = closedByUs
	}
	c.remember(st.id, by)
	if f := st.onAbort; f != nil && err != nil {
		st.onAbort = nil
		f()
	}
	st.onAbort = nil
	if st.done != nil {
		close(st.done)
	}
	poke(st.wwake)
	if len(c.streams) == 0 {
		c.end.lastClosed()
	}
}

// recentLen closed streams are remembered, so that frames on them get the
// answer §5.1 asks: ignored after our RST_STREAM, STREAM_CLOSED otherwise.
const recentLen = 16

type closedHow uint8

const (
	closedUnknown closedHow = iota
	closedNormally
	closedByUs
)

type closedStream struct {
	id  uint32
	how closedHow
}

func (c *core) remember(id uint32, how closedHow) {
	c.recent[c.recentAt] = closedStream{id, how}
	c.recentAt = (c.recentAt + 1) % recentLen
}

// closedBy says how stream id closed, if it is remembered. The lock is
// held.
func (c *core) closedBy(id uint32) closedHow {
	for _, r := range c.recent {
		if r.id == id {
			return r.how
		}
	}
	return closedUnknown
}

// beginShutdown marks the connection shutting down and returns with the
// lock held; false, the lock not held, when it already was, or closed.
func (c *core) beginShutdown() bool {
	c.mu.Lock()
	if c.shutdown || c.closed {
		c.mu.Unlock()
		return false
	}
	c.shutdown = true
	return true
}

// goAwayLocked queues our GOAWAY with code and debug, naming lastID. The
// lock is held.
func (c *core) goAwayLocked(code http2.ErrCode, debug string) {
	c.goAway = true
	c.goAwayDebug = debug
	c.queue = append(c.queue, ctrl{kind: cGoAway, id: c.lastID, val: uint32(code)})
}

// connFail answers a connection error found reading (§5.4.1): GOAWAY with
// its code, flushed; sent reports whether it was. It is not sent when the
// peer has left too many answers unread: it would only queue behind them.
func (c *core) connFail(e connErr) (err *ConnError, sent bool) {
	err = &ConnError{Code: e.code, Reason: e.reason}
	c.mu.Lock()
	overflow := len(c.queue) > maxQueued
	if !overflow {
		c.goAwayLocked(e.code, e.reason)
	}
	c.mu.Unlock()
	return err, !overflow && c.flush() == nil
}

// budget is a token bucket: take fails once the bucket is empty, and it
// refills at rate per second up to burst. It is kept small (a connection
// holds three): its clock is nanoseconds of the monotonic clock.
type budget struct {
	tokens      float64
	last        int64 // when tokens was brought up to date (budgetClock); 0: never
	burst, rate float32
}

func newBudget(burst, rate float64) budget {
	return budget{tokens: burst, burst: float32(burst), rate: float32(rate)}
}

// budgetClock is what budgets count time from.
var budgetClock = time.Now()

func (b *budget) take(n float64) bool {
	now := int64(time.Since(budgetClock))
	if b.last != 0 {
		b.tokens = min(float64(b.burst), b.tokens+float64(now-b.last)/1e9*float64(b.rate))
	}
	b.last = now
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

func (b *budget) give(n float64) { b.tokens = min(float64(b.burst), b.tokens+n) }
