// Package h2 speaks HTTP/2 (RFC 9113) on a net.Conn, both sides: the server
// (Conn, Stream) for sluice's clients, and the client (ClientConn,
// ClientStream, client.go) for its upstreams. Each has the connection and
// stream state machines, flow control in both directions, HPACK, and the
// bounds that keep a hostile peer from spending sluice's memory or time.
// It reads and writes frames with golang.org/x/net/http2's Framer and
// hpack, and uses nothing of net/http.
//
// A Conn reads frames on the goroutine that calls Serve, and starts one
// goroutine per stream to run the Handler. Frames are written by whichever
// goroutine has something to send, under one write lock; answers the read
// loop owes the client (SETTINGS and PING acknowledgements, RST_STREAM,
// WINDOW_UPDATE, GOAWAY) are queued and written by the next writer, so the
// read loop never waits for the client to read.
package h2

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Settings bound what a client may do on one connection. Zero fields take
// the defaults shown. A Settings is read once, by NewConn.
type Settings struct {
	// MaxConcurrentStreams: 250. Streams beyond it are refused with
	// RST_STREAM(REFUSED_STREAM); so are streams while this many handlers
	// still run, even of streams the client has reset.
	MaxConcurrentStreams uint32
	// InitialWindow: 1 MiB. Each stream's receive window
	// (SETTINGS_INITIAL_WINDOW_SIZE), at most 2^31-1.
	InitialWindow uint32
	// ConnWindow: max(2×InitialWindow, 1 MiB), at most 2^31-1. The
	// connection's receive window, announced with a WINDOW_UPDATE on stream
	// 0 after the SETTINGS. Above InitialWindow so that one stream whose
	// handler stops reading cannot stall the others.
	ConnWindow uint32
	// MaxHeaderList: 64 KiB. SETTINGS_MAX_HEADER_LIST_SIZE, enforced while
	// decoding: a request over it is answered 431, trailers over it reset;
	// a header block whose frames carry more than twice as many bytes is a
	// connection error.
	MaxHeaderList uint32
	// MaxFrameSize: 16 KiB, the largest frame accepted (16384 to 2^24-1).
	// Frames sent are bounded by the client's own SETTINGS_MAX_FRAME_SIZE.
	MaxFrameSize uint32
	// IdleTimeout: 0, none. With no open stream for this long the
	// connection is closed with GOAWAY(NO_ERROR).
	IdleTimeout time.Duration
	// ParkAfter: 0, never. With no open stream and no byte from the
	// client for this long, Serve returns ErrIdle, leaving the connection
	// open, so that an idle connection can wait without a goroutine (see
	// ErrIdle). Meant to be shorter than IdleTimeout.
	ParkAfter time.Duration
	// PingTimeout: 1 s. How long Shutdown waits for the acknowledgement of
	// its PING before it sends the final GOAWAY.
	PingTimeout time.Duration
	// WriteTimeout: 30 s. A write to the connection that cannot complete in
	// this long ends the connection, so that a client that stops reading
	// cannot hold the server's goroutines or buffers.
	WriteTimeout time.Duration
	// ErrorLog: nil, no logging. Receives handler panics and connection
	// errors.
	ErrorLog *slog.Logger
}

const (
	maxWindow       = 1<<31 - 1 // §6.9.1
	defaultWindow   = 65535     // §6.9.2, before SETTINGS
	defaultMaxFrame = 16384     // §4.2
	goAwayLinger    = time.Second
)

func (s *Settings) withDefaults() Settings {
	var d Settings
	if s != nil {
		d = *s
	}
	if d.MaxConcurrentStreams == 0 {
		d.MaxConcurrentStreams = 250
	}
	if d.InitialWindow == 0 {
		d.InitialWindow = 1 << 20
	}
	d.InitialWindow = min(d.InitialWindow, maxWindow)
	if d.ConnWindow == 0 {
		d.ConnWindow = uint32(max(min(2*uint64(d.InitialWindow), maxWindow), 1<<20))
	}
	d.ConnWindow = max(min(d.ConnWindow, maxWindow), defaultWindow)
	if d.MaxHeaderList == 0 {
		d.MaxHeaderList = 64 << 10
	}
	if d.MaxFrameSize == 0 {
		d.MaxFrameSize = defaultMaxFrame
	}
	d.MaxFrameSize = min(max(d.MaxFrameSize, defaultMaxFrame), 1<<24-1)
	if d.PingTimeout <= 0 {
		d.PingTimeout = time.Second
	}
	if d.WriteTimeout <= 0 {
		d.WriteTimeout = 30 * time.Second
	}
	if d.ErrorLog == nil {
		d.ErrorLog = slog.New(slog.DiscardHandler)
	}
	return d
}

// limits are the abuse bounds (reference §3 gives what peers use). They are
// not settings: a test may lower them.
type limits struct {
	resetBurst, resetRate   float64 // premature RST_STREAMs from the client
	refuseBurst, refuseRate float64 // streams refused past MaxConcurrentStreams
	glitchBurst, glitchRate float64 // frames that ask work and carry none
	glitchPerWork           float64 // given back per stream opened or DATA frame sent
	maxQueued               int     // answers queued while the client does not read
	maxBlockFrames          int     // frames in one header block
}

func defaultLimits(s *Settings) limits {
	return limits{
		resetBurst: float64(max(200, 2*s.MaxConcurrentStreams)), resetRate: 20,
		refuseBurst: 100, refuseRate: 10,
		glitchBurst: 5000, glitchRate: 500, glitchPerWork: 4,
		maxQueued:      8192, // past glitchBurst: a client that reads gets the GOAWAY of the glitch budget first
		maxBlockFrames: int(2*uint64(s.MaxHeaderList)/1024) + 2,
	}
}

// budget is a token bucket: take fails once the bucket is empty, and it
// refills at rate per second up to burst.
type budget struct {
	tokens, burst, rate float64
	last                time.Time
}

func newBudget(burst, rate float64) budget { return budget{tokens: burst, burst: burst, rate: rate} }

func (b *budget) take(n float64) bool {
	now := time.Now()
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

func (b *budget) give(n float64) { b.tokens = min(b.burst, b.tokens+n) }

// Handler serves one stream. It runs in its own goroutine, started once the
// request's header block is whole and valid. When it returns, the stream is
// finished: if its response did not end, the stream is reset with
// RST_STREAM(INTERNAL_ERROR); if the response ended but the request body did
// not, with RST_STREAM(NO_ERROR) (RFC 9113 §8.1). A panic in it is recovered,
// logged to Settings.ErrorLog, and resets the stream the same way.
type Handler func(st *Stream)

// Conn is the server side of one HTTP/2 connection. Make it with NewConn,
// run it with Serve; Shutdown and Close may be called from any goroutine, at
// any time, any number of times.
type Conn struct {
	nc  net.Conn
	s   Settings
	h   Handler
	lim limits
	log *slog.Logger
	wg  sync.WaitGroup // stream handlers

	// Owned by the goroutine in Serve.
	rd          connReader
	fr          *http2.Framer
	dec         *hpack.Decoder
	blk         headerBlock
	bigRead     bool // fr holds a large read buffer: renew it once idle
	sawSettings bool

	// The lock over what follows, the frames owed to the client and the
	// glitch budget (ctrl.go).
	ctrlQueue

	streams       map[uint32]*Stream // open and half-closed streams (§5.1)
	recent        [recentLen]closedStream
	recentAt      int
	maxID         uint32 // highest client stream id seen: lower unknown ids are closed
	lastID        uint32 // highest stream id handed to a handler: GOAWAY's last stream id
	handlers      int    // handler goroutines running
	settingsAcked bool
	peerTable     uint32 // client's SETTINGS_HEADER_TABLE_SIZE, to apply to the encoder
	peerTableSet  bool
	serving       bool
	idleBy        time.Time // when IdleTimeout ends the idle connection; zero while a stream is open
	parkBy        time.Time // when the idle connection parks (ParkAfter); zero while a stream is open
	shutdown      bool      // Shutdown called: first GOAWAY and PING queued
	goAway        bool      // final GOAWAY queued: no new stream
	peerGoAway    bool
	ending        bool // graceful end decided: the read loop stops at its next read
	closed        bool
	userClosed    bool
	writeFailed   error // why a write to the connection failed
	shutdownTimer *time.Timer
	goAwayDebug   string
	resets        budget
	refusals      budget

	// Write side; see write.go.
	waiting atomic.Int32
	// uncorking is set while an uncork goroutine is on its way to flush
	// what writers left buffered (unlockWrite).
	uncorking atomic.Bool
	wmu       sync.Mutex
	wb        *writeBuf
	henc      headerEncoder // the write lock guards it
	werr      error
}

// NewConn prepares to serve HTTP/2 on nc with settings s (nil: defaults) and
// handler h. prefix holds bytes already read from nc (possibly none, possibly
// a part of or the whole client connection preface, and more): Serve reads
// them before nc. NewConn does no I/O.
func NewConn(nc net.Conn, prefix []byte, s *Settings, h Handler) *Conn {
	c := &Conn{nc: nc, s: s.withDefaults(), h: h}
	c.lim = defaultLimits(&c.s)
	c.log = c.s.ErrorLog
	c.rd = newConnReader(c, nc, prefix)
	c.send = newSender()
	c.recv = newReceiver(c.s.ConnWindow, c.s.InitialWindow)
	c.resets = newBudget(c.lim.resetBurst, c.lim.resetRate)
	c.refusals = newBudget(c.lim.refuseBurst, c.lim.refuseRate)
	c.glitches = newBudget(c.lim.glitchBurst, c.lim.glitchRate)
	// The server preface (§3.4) goes first in the queue, so that nothing
	// queued by an early Shutdown can precede it.
	c.queue = append(c.queue, ctrl{kind: cSettings})
	if c.s.ConnWindow > defaultWindow {
		c.queue = append(c.queue, ctrl{kind: cWindow, val: c.s.ConnWindow - defaultWindow})
	}
	return c
}

// ServeConn serves HTTP/2 on nc until the connection ends; it is
// NewConn(nc, prefix, s, h).Serve(). Use NewConn to keep the *Conn for
// Shutdown and Close.
func ServeConn(nc net.Conn, prefix []byte, s *Settings, h Handler) error {
	return NewConn(nc, prefix, s, h).Serve()
}

// ErrIdle is returned by Serve when Settings.ParkAfter is set and the
// connection has had no open stream, no running handler and no byte of a
// frame from the client for that long. The connection stays open, with
// nothing read and not processed, and nothing reads it: Serve is to be
// called again, on any goroutine, once the connection is readable (bytes,
// or the client's close), once IdleDeadline has passed, or after Shutdown
// or Close. The caller can wait for those without a goroutine (sluice's
// proxy waits in epoll); what the connection costs meanwhile is its
// memory alone.
var ErrIdle = errors.New("h2: connection idle")

// Serve serves the connection until it ends, and returns once every stream
// handler has returned and the connection is closed. It returns nil when the
// client closed the connection, or Shutdown, Close or IdleTimeout ended it;
// a *ConnError when a connection error was detected (RFC 9113 §5.4.1);
// another error when reading or writing failed; ErrIdle when the open
// connection idled ParkAfter. It may be called again only after ErrIdle.
func (c *Conn) Serve() error {
	c.mu.Lock()
	if c.serving {
		c.mu.Unlock()
		return errors.New("h2: Serve called twice")
	}
	c.serving = true
	c.mu.Unlock()

	err := c.serve()

	c.mu.Lock()
	if err == ErrIdle {
		c.serving = false
		c.mu.Unlock()
		return err
	}
	c.closed = true
	if c.shutdownTimer != nil {
		c.shutdownTimer.Stop()
	}
	for _, st := range c.streams {
		c.closeStream(st, ErrConnClosed)
	}
	if c.userClosed {
		err = nil
	} else if err == nil && c.writeFailed != nil {
		err = c.writeFailed
	}
	c.mu.Unlock()
	c.nc.Close()
	c.wg.Wait()
	c.rd.release()
	if err != nil {
		var ce *ConnError
		if errors.As(err, &ce) {
			c.log.Debug("h2: connection error", "remote", c.nc.RemoteAddr(), "code", ce.Code, "reason", ce.Reason)
		}
	}
	return err
}

// Shutdown starts a graceful close (RFC 9113 §6.8): GOAWAY with last stream
// id 2^31-1 and a PING; after the PING's acknowledgement (or PingTimeout)
// GOAWAY with the real last stream id. Streams already open finish; no new
// stream is accepted after the second GOAWAY; the connection closes once no
// stream is left. Shutdown does not wait.
func (c *Conn) Shutdown() {
	c.mu.Lock()
	if c.shutdown || c.closed {
		c.mu.Unlock()
		return
	}
	c.shutdown = true
	c.queue = append(c.queue,
		ctrl{kind: cGoAway, id: maxWindow},
		ctrl{kind: cPing, data: shutdownPing})
	c.shutdownTimer = time.AfterFunc(c.s.PingTimeout, c.finalGoAway)
	c.mu.Unlock()
	c.kick()
}

// Close ends the connection at once: no GOAWAY; handlers see Done closed and
// ErrConnClosed from their streams. Serve then returns nil.
func (c *Conn) Close() {
	c.mu.Lock()
	c.userClosed = true
	c.mu.Unlock()
	c.nc.Close()
}

var shutdownPing = [8]byte{'s', 'h', 'u', 't', 'd', 'o', 'w', 'n'}

// finalGoAway sends the second GOAWAY of a graceful close, with the real last
// stream id; from then on new streams are ignored.
func (c *Conn) finalGoAway() {
	c.mu.Lock()
	if c.goAway || c.closed {
		c.mu.Unlock()
		return
	}
	c.goAway = true
	c.queue = append(c.queue, ctrl{kind: cGoAway, id: c.lastID})
	if len(c.streams) == 0 {
		c.finishLocked()
	}
	c.mu.Unlock()
	c.kick()
}

// finishLocked decides the graceful end: the read loop is woken by a read
// deadline in the past and, seeing ending, flushes and closes.
func (c *Conn) finishLocked() {
	if c.ending {
		return
	}
	c.ending = true
	c.nc.SetReadDeadline(time.Now())
}

// idleLocked is called when the last open stream closes.
func (c *Conn) idleLocked() {
	switch {
	case c.closed:
	case c.goAway || c.peerGoAway:
		c.finishLocked()
	case !c.ending:
		now := time.Now()
		if c.s.IdleTimeout > 0 {
			c.idleBy = now.Add(c.s.IdleTimeout)
		}
		c.parkLaterLocked(now)
	}
}

// parkLaterLocked sets the read deadline of an idle connection: the idle
// timeout, or ParkAfter from now when that comes first.
func (c *Conn) parkLaterLocked(now time.Time) {
	by := c.idleBy
	if c.s.ParkAfter > 0 {
		c.parkBy = now.Add(c.s.ParkAfter)
		if by.IsZero() || c.parkBy.Before(by) {
			by = c.parkBy
		}
	}
	if !by.IsZero() {
		c.nc.SetReadDeadline(by)
	}
}

// timedOut decides what a read that timed out is to do (see connReader).
// The deadline was the graceful end's, the idle timeout's, or ParkAfter's:
// only the last lets the read go on, moved to the idle timeout's, or,
// when the connection is between frames with nothing else to do, has the
// read return for Serve to return ErrIdle. It runs on Serve's goroutine,
// in the read.
func (c *Conn) timedOut(begun bool) onTimeout {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	switch {
	case c.ending || c.parkBy.IsZero() || now.Before(c.parkBy):
		return failRead
	case c.shutdown || len(c.streams) > 0:
		// Shutting down (a PING answer, the client's close) or busy.
		c.parkBy = time.Time{}
		c.nc.SetReadDeadline(c.idleBy)
		return readOn
	case begun || c.blk.id != 0 || c.handlers > 0:
		// A frame or a header block came in part, or a handler of a
		// reset stream still runs: look again later.
		c.parkLaterLocked(now)
		return readOn
	}
	return parkRead
}

// shed lets go of what an idle connection can make again when it
// resumes: its Framer (a fresh one is made between frames for the same
// reason, bigRead) and the emptied map of its streams.
func (c *Conn) shed() {
	c.fr = nil
	c.mu.Lock()
	if len(c.streams) == 0 {
		c.streams = nil
	}
	c.mu.Unlock()
}

// IdleDeadline returns when the idle timeout is to end a connection Serve
// left with ErrIdle; zero: never.
func (c *Conn) IdleDeadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.idleBy
}

var errEnded = errors.New("h2: ended gracefully")

// serve reads the preface, then frames, until the connection ends or
// parks (ErrIdle).
func (c *Conn) serve() error {
	if c.dec == nil {
		if done, err := c.begin(); done {
			return err
		}
	} else {
		// Called again after ErrIdle: reading resumes with a new park
		// deadline (the last has passed).
		c.fr = c.newReadFramer()
		c.mu.Lock()
		if !c.ending {
			c.parkLaterLocked(time.Now())
		}
		c.mu.Unlock()
	}
	for {
		if c.bigRead {
			c.mu.Lock()
			idle := len(c.streams) == 0
			c.mu.Unlock()
			if idle && c.blk.id == 0 {
				c.fr, c.bigRead = c.newReadFramer(), false
			}
		}
		err := c.readFrame()
		if err == nil {
			continue
		}
		switch e := err.(type) {
		case streamErr:
			if ce := c.resetByEngine(e.id, e.code); ce != nil {
				return c.connFail(*ce)
			}
			continue
		case connErr:
			return c.connFail(e)
		}
		if err == errEnded {
			return c.goodbye(nil, "")
		}
		if err == ErrIdle {
			c.shed()
			return err
		}
		if isTimeout(err) {
			c.mu.Lock()
			ending, idle := c.ending, len(c.streams) == 0 && c.s.IdleTimeout > 0
			c.mu.Unlock()
			if ending {
				return c.goodbye(nil, "")
			}
			if idle {
				return c.goodbye(&ctrl{kind: cGoAway}, "idle")
			}
		}
		if err == io.EOF || errors.Is(err, net.ErrClosed) {
			return nil
		}
		return err
	}
}

// begin reads the client's preface and readies the reading of frames. It
// reports done, and what Serve is to return, when the connection ended
// before.
func (c *Conn) begin() (done bool, err error) {
	if c.s.IdleTimeout > 0 {
		c.nc.SetReadDeadline(time.Now().Add(c.s.IdleTimeout))
	}
	var pre [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(&c.rd, pre[:]); err != nil {
		if isTimeout(err) || err == io.EOF {
			return true, nil // nothing begun, nothing owed
		}
		return true, err
	}
	if string(pre[:]) != http2.ClientPreface {
		// §3.4: not HTTP/2; a GOAWAY would mean nothing to the client.
		c.rd.linger()
		return true, &ConnError{Code: http2.ErrCodeProtocol, Reason: "invalid connection preface"}
	}
	c.kick() // our SETTINGS
	c.dec = hpack.NewDecoder(4096, c.onField)
	c.dec.SetMaxStringLength(int(c.s.MaxHeaderList))
	c.fr = c.newReadFramer()
	c.mu.Lock()
	if len(c.streams) == 0 && !c.ending {
		// As if a stream had just ended: the idle timeout and the park
		// deadline count from here.
		c.idleLocked()
	}
	c.mu.Unlock()
	return false, nil
}

func (c *Conn) newReadFramer() *http2.Framer {
	fr := http2.NewFramer(nil, &c.rd)
	fr.SetMaxReadFrameSize(c.s.MaxFrameSize)
	// Each frame is done with before the next is read (DATA is copied
	// into its stream): one DataFrame serves them all.
	fr.SetReuseFrames()
	return fr
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// readFrame reads and processes one frame. It returns a streamErr or connErr
// for protocol errors, errEnded when a graceful end was decided, and read
// errors as they are.
func (c *Conn) readFrame() error {
	c.rd.begin()
	fh, err := c.fr.ReadFrameHeader()
	if err != nil {
		if c.rd.parked {
			c.rd.parked = false
			return ErrIdle
		}
		if c.rd.err != nil {
			return c.readErr()
		}
		if err == http2.ErrFrameTooLarge {
			return connErr{http2.ErrCodeFrameSize, "frame too large"} // §4.2
		}
		return c.frameErr(err, fh)
	}
	if fh.Length > 4096 {
		c.bigRead = true
	}
	f, err := c.fr.ReadFrameForHeader(fh)
	if err != nil {
		if c.rd.err != nil {
			return c.readErr()
		}
		return c.frameErr(err, fh)
	}
	if !c.sawSettings {
		// §3.4: the client preface goes on with a SETTINGS frame.
		if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
			return connErr{http2.ErrCodeProtocol, "first frame is not SETTINGS"}
		}
		c.sawSettings = true
	}
	return c.process(f)
}

func (c *Conn) readErr() error {
	c.mu.Lock()
	ending := c.ending
	c.mu.Unlock()
	if ending && isTimeout(c.rd.err) {
		return errEnded
	}
	return c.rd.err
}

// frameErr converts what the Framer says about a frame it would not parse.
func (c *Conn) frameErr(err error, fh http2.FrameHeader) error {
	return frameError(c.fr, err, fh)
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
		return streamErr{se.StreamID, se.Code}
	}
	// What remains is a payload too short for its mandatory fields (§4.2).
	return connErr{http2.ErrCodeFrameSize, reason}
}

// connFail ends the connection on a connection error: GOAWAY with the last
// stream id and the code, then close (§5.4.1).
func (c *Conn) connFail(e connErr) error {
	err := &ConnError{Code: e.code, Reason: e.reason}
	c.mu.Lock()
	overflow := len(c.queue) > c.lim.maxQueued
	c.mu.Unlock()
	if overflow {
		// The client does not read what is owed to it; a GOAWAY would
		// only queue behind the rest.
		return err
	}
	c.goodbye(&ctrl{kind: cGoAway, val: uint32(e.code)}, e.reason)
	return err
}

// goodbye queues a last frame if any, flushes, and lingers: it half-closes
// and reads what the client still sends for a short while, so that closing
// with unread input does not reset the connection before the client has read
// the GOAWAY.
func (c *Conn) goodbye(last *ctrl, debug string) error {
	c.mu.Lock()
	c.ending = true
	if last != nil {
		last.id = c.lastID
		c.goAway = true
		c.goAwayDebug = debug
		c.queue = append(c.queue, *last)
	}
	c.mu.Unlock()
	if _, err := c.lockWrite(); err == nil {
		if err := c.unlockWrite(true); err != nil {
			return nil
		}
	} else {
		return nil
	}
	c.rd.linger()
	return nil
}

// answer queues a frame the client asked for; it fails when the client has
// left too many unread (CVE-2019-9512, CVE-2019-9515).
func (c *Conn) answer(x ctrl) error { return c.enqueue(x, c.lim.maxQueued) }

func (c *Conn) process(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.HeadersFrame:
		return c.onHeaders(f)
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
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID { // §5.3.1
			return streamErr{f.StreamID, http2.ErrCodeProtocol}
		}
		return c.glitch(1) // §5.3.2: deprecated, ignored
	case *http2.GoAwayFrame:
		c.mu.Lock()
		c.peerGoAway = true
		if len(c.streams) == 0 {
			c.finishLocked()
		}
		c.mu.Unlock()
		return nil
	case *http2.PushPromiseFrame:
		return connErr{http2.ErrCodeProtocol, "PUSH_PROMISE from a client"} // §8.4
	}
	return c.glitch(1) // §4.1, §5.5: unknown frame types are ignored
}

func (c *Conn) onSettings(f *http2.SettingsFrame) error {
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
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			c.peerTable, c.peerTableSet = s.Val, true
		case http2.SettingInitialWindowSize:
			// §6.9.2: the change applies to every open stream's window,
			// which may go negative, and must not pass 2^31-1.
			delta := int64(s.Val) - c.send.peerWindow
			c.send.peerWindow = int64(s.Val)
			for _, st := range c.streams {
				if !c.resize(&st.outbound, delta) {
					return connErr{http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a window"}
				}
			}
		case http2.SettingMaxFrameSize:
			c.send.peerMaxFrame = s.Val
		}
		return nil
	})
	c.mu.Unlock()
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &ce):
		return connErr{http2.ErrCode(ce), "invalid SETTINGS value"}
	case err != nil:
		return err
	}
	return c.answer(ctrl{kind: cSettingsAck})
}

func (c *Conn) onPing(f *http2.PingFrame) error {
	if f.IsAck() {
		if f.Data == shutdownPing {
			c.finalGoAway()
		}
		return nil
	}
	if err := c.glitch(1); err != nil {
		return err
	}
	return c.answer(ctrl{kind: cPingAck, data: f.Data})
}

func (c *Conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
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
		for _, st := range c.streams {
			if st.wantCredit {
				poke(st.wwake)
			}
		}
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxID { // §5.1: idle
			return connErr{http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream"}
		}
		return nil // §5.1: may arrive after the stream closed
	}
	if !c.credit(&st.outbound, inc) {
		return streamErr{st.id, http2.ErrCodeFlowControl}
	}
	return nil
}

func (c *Conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID > c.maxID {
		return connErr{http2.ErrCodeProtocol, "RST_STREAM on an idle stream"} // §6.4
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil
	}
	// Rapid reset (CVE-2023-44487): a stream reset before its response
	// ended cost a handler for nothing.
	if !st.ended && !c.resets.take(1) {
		return connErr{http2.ErrCodeEnhanceYourCalm, "too many streams reset"}
	}
	c.closeStream(st, &ResetError{StreamID: st.id, Code: f.ErrCode, Remote: true})
	return nil
}

func (c *Conn) onData(f *http2.DataFrame) error {
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
	st := c.streams[id]
	if st == nil {
		if id > c.maxID {
			return connErr{http2.ErrCodeProtocol, "DATA on an idle stream"} // §5.1
		}
		c.returnConn(n)
		if c.closedBy(id) == closedByUs {
			return nil // §5.1: frames in flight when we reset it
		}
		return streamErr{id, http2.ErrCodeStreamClosed}
	}
	if st.remoteEnded {
		c.returnConn(n)
		return streamErr{id, http2.ErrCodeStreamClosed} // §5.1: half-closed (remote)
	}
	if n > st.recvWin {
		c.returnConn(n)
		return streamErr{id, http2.ErrCodeFlowControl}
	}
	st.recvWin -= n
	if pad := n - int64(len(data)); pad > 0 {
		c.consumed(&st.inbound, pad)
	}
	st.received += int64(len(data))
	if st.length >= 0 && st.received > st.length {
		c.returnConn(int64(len(data)))
		return streamErr{id, http2.ErrCodeProtocol} // §8.1.1
	}
	if len(data) > 0 {
		st.buf = append(st.buf, data...)
		poke(st.rwake)
	}
	if f.StreamEnded() {
		return c.remoteEnd(st)
	}
	return nil
}

// remoteEnd moves st to half-closed (remote), or closed.
func (c *Conn) remoteEnd(st *Stream) error {
	if st.length >= 0 && st.received != st.length {
		return streamErr{st.id, http2.ErrCodeProtocol} // §8.1.1
	}
	st.remoteEnded = true
	poke(st.rwake)
	if st.ended {
		c.closeStream(st, nil)
	}
	return nil
}

// resetByEngine answers a stream error with RST_STREAM (§5.4.2). A stream
// error on an idle stream becomes a connection error: RST_STREAM must not be
// sent on an idle stream (§5.1). So does an error when the answers owed have
// piled up.
func (c *Conn) resetByEngine(id uint32, code http2.ErrCode) *connErr {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id > c.maxID {
		return &connErr{code, "stream error on an idle stream"}
	}
	if st := c.streams[id]; st != nil {
		c.closeStream(st, &ResetError{StreamID: id, Code: code})
	} else {
		c.remember(id, closedByUs)
	}
	c.queue = append(c.queue, ctrl{kind: cRST, id: id, val: uint32(code)})
	if len(c.queue) > c.lim.maxQueued {
		return &connErr{http2.ErrCodeEnhanceYourCalm, "too many queued frames"}
	}
	return nil
}

// closeStream moves st to closed (§5.1) for err: nil when both sides ended,
// the reason otherwise. Its handler, if still running, sees Done closed.
func (c *Conn) closeStream(st *Stream, err error) {
	if st.closed {
		return
	}
	// A handler does not read a request body after a reset.
	c.closeInbound(&st.inbound, err, false)
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
		c.idleLocked()
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

func (c *Conn) remember(id uint32, how closedHow) {
	c.recent[c.recentAt] = closedStream{id, how}
	c.recentAt = (c.recentAt + 1) % recentLen
}

func (c *Conn) closedBy(id uint32) closedHow {
	for _, r := range c.recent {
		if r.id == id {
			return r.how
		}
	}
	return closedUnknown
}

// runHandler runs the handler of st and finishes the stream after it.
func (c *Conn) runHandler(st *Stream) {
	defer c.wg.Done()
	defer c.handlerDone(st)
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("h2: handler panic", "stream", st.id, "panic", r)
		}
	}()
	c.h(st)
}

func (c *Conn) handlerDone(st *Stream) {
	c.mu.Lock()
	c.handlers--
	// Nobody reads what is left of the request body: it goes back to
	// the client's window, as the stream closes (closeInbound), or went
	// back when it closed.
	if st.closed {
		st.drop()
	}
	if !st.closed {
		code := http2.ErrCodeInternal
		if st.ended {
			code = http2.ErrCodeNo // §8.1: response complete, request body not needed
		}
		c.queue = append(c.queue, ctrl{kind: cRST, id: st.id, val: uint32(code)})
		c.closeStream(st, &ResetError{StreamID: st.id, Code: code})
	}
	c.mu.Unlock()
	c.kick()
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
