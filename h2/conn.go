// Package h2 speaks HTTP/2 (RFC 9113) on a net.Conn, both sides: the server
// (Conn, Stream) for sluice's clients, and the client (ClientConn,
// ClientStream, client.go) for its upstreams. Both embed one connection
// core (core.go): the reading and dispatch of frames, SETTINGS, PING,
// WINDOW_UPDATE and flow control both ways, the reassembly of header
// blocks, the stream's read buffer and credit (streams.go), the write path
// and its batching (write.go), and the bounds that keep a hostile peer from
// spending sluice's memory or time. Each end adds what its role gives
// meaning to: requests and handlers, or responses, GOAWAY and retries. It
// reads and writes frames with golang.org/x/net/http2's Framer and hpack,
// and uses nothing of net/http.
//
// A Conn reads frames on the goroutine that calls Serve, and starts one
// goroutine per stream to run the Handler; a ClientConn reads frames on a
// goroutine of its own. Frames are written by whichever goroutine has
// something to send, under one write lock; answers the read loop owes the
// peer (SETTINGS and PING acknowledgements, RST_STREAM, WINDOW_UPDATE,
// GOAWAY) are queued and written by the next writer, so the read loop never
// waits for the peer to read.
package h2

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluice-proxy/sluice/internal/clock"
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

func (s *Settings) withDefaults() Settings {
	var d Settings
	if s != nil {
		d = *s
	}
	if d.MaxConcurrentStreams == 0 {
		d.MaxConcurrentStreams = 250
	}
	if d.PingTimeout <= 0 {
		d.PingTimeout = time.Second
	}
	return d
}

// config is what Settings has of the settings both ends have.
func (s *Settings) config() config {
	return config{s.InitialWindow, s.ConnWindow, s.MaxHeaderList, s.MaxFrameSize, s.WriteTimeout, s.ErrorLog}.defaults(0)
}

// Abuse bounds only a server has (reference §3 gives what peers use); not
// settings.
const (
	// Streams the client resets before their response ended (rapid
	// reset): a burst of max(minResetBurst, 2×MaxConcurrentStreams), then
	// resetRate a second.
	minResetBurst, resetRate = 200, 20
	// Streams refused past MaxConcurrentStreams.
	refuseBurst, refuseRate = 100, 10
)

// Handler serves one stream. It runs in its own goroutine, started once the
// request's header block is whole and valid. When it returns, the stream is
// finished: if its response did not end, the stream is reset with
// RST_STREAM(INTERNAL_ERROR); if the response ended but the request body did
// not, with RST_STREAM(NO_ERROR) (RFC 9113 §8.1). A panic in it is recovered,
// logged to Settings.ErrorLog, and resets the stream the same way. The
// Stream, its fields and its trailers must not be used once the Handler
// has returned: the engine reuses the Stream for a later request, as
// net/http forbids a ResponseWriter after ServeHTTP.
type Handler func(st *Stream)

// Conn is the server side of one HTTP/2 connection. Make it with NewConn,
// run it with Serve; Shutdown and Close may be called from any goroutine, at
// any time, any number of times.
type Conn struct {
	core
	h  Handler
	wg sync.WaitGroup // stream handlers

	// Settings, read-only; maxStreams beside maxID, where it packs.
	idleTimeout time.Duration
	parkAfter   time.Duration
	pingTimeout time.Duration

	req reqBlock // owned by the goroutine in Serve

	maxStreams uint32
	// Guarded by core.mu.
	maxID         uint32    // highest client stream id seen: lower unknown ids are closed
	handlers      int       // handler goroutines running
	idleBy        time.Time // when IdleTimeout ends the idle connection; zero while a stream is open
	parkBy        time.Time // when the idle connection parks (ParkAfter); zero while a stream is open
	serving       bool
	peerGoAway    bool
	ending        bool // graceful end decided: the read loop stops at its next read
	shutdownTimer *time.Timer
	resets        budget
	refusals      budget
}

// NewConn prepares to serve HTTP/2 on nc with settings s (nil: defaults) and
// handler h. prefix holds bytes already read from nc (possibly none, possibly
// a part of or the whole client connection preface, and more): Serve reads
// them before nc. NewConn does no I/O.
func NewConn(nc net.Conn, prefix []byte, s *Settings, h Handler) *Conn {
	d := s.withDefaults()
	c := &Conn{h: h, maxStreams: d.MaxConcurrentStreams, idleTimeout: d.IdleTimeout, parkAfter: d.ParkAfter, pingTimeout: d.PingTimeout}
	c.init(c, false, nc, prefix, d.config(), c.maxStreams)
	c.resets = newBudget(float64(max(minResetBurst, 2*c.maxStreams)), resetRate)
	c.refusals = newBudget(refuseBurst, refuseRate)
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
	for _, p := range c.streams {
		c.closeStream(p.base(), ErrConnClosed)
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
	if !c.beginShutdown() {
		return
	}
	c.queue = append(c.queue,
		ctrl{kind: cGoAway, id: maxStreamID},
		ctrl{kind: cPing, data: shutdownPing})
	c.shutdownTimer = time.AfterFunc(c.pingTimeout, c.finalGoAway)
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
	c.goAwayLocked(http2.ErrCodeNo, "")
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

// lastClosed is called when the last open stream closes (endpoint).
func (c *Conn) lastClosed() {
	switch {
	case c.closed:
	case c.goAway || c.peerGoAway:
		c.finishLocked()
	case !c.ending:
		now := clock.Now()
		if c.idleTimeout > 0 {
			c.idleBy = now.Add(c.idleTimeout)
		}
		c.parkLaterLocked(now)
	}
}

// parkLaterLocked sets the read deadline of an idle connection: the idle
// timeout, or ParkAfter from now when that comes first.
func (c *Conn) parkLaterLocked(now time.Time) {
	by := c.idleBy
	if c.parkAfter > 0 {
		c.parkBy = now.Add(c.parkAfter)
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
// reason, bigRead), the emptied map of its streams and queue of frames
// owed, and the timers kept for its waits.
func (c *Conn) shed() {
	c.fr = nil
	c.mu.Lock()
	if len(c.streams) == 0 {
		c.streams = nil
	}
	if len(c.queue) == 0 {
		c.queue = nil
	}
	c.spares, c.nspares = nil, 0
	c.mu.Unlock()
	c.wmu.Lock()
	c.henc.release()
	c.wmu.Unlock()
}

// IdleDeadline returns when the idle timeout is to end a connection Serve
// left with ErrIdle; zero: never.
func (c *Conn) IdleDeadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.idleBy
}

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
		err := c.next()
		if err == nil {
			continue
		}
		if e, ok := err.(connErr); ok {
			ce, sent := c.connFail(e)
			if sent {
				c.rd.linger()
			}
			return ce
		}
		if err == ErrIdle {
			c.shed()
			return err
		}
		if isTimeout(err) {
			c.mu.Lock()
			ending, idle := c.ending, len(c.streams) == 0 && c.idleTimeout > 0
			c.mu.Unlock()
			if ending {
				return c.goodbye(false, "")
			}
			if idle {
				return c.goodbye(true, "idle")
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
	if c.idleTimeout > 0 {
		c.nc.SetReadDeadline(time.Now().Add(c.idleTimeout))
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
	c.startReading()
	c.mu.Lock()
	if len(c.streams) == 0 && !c.ending {
		// As if a stream had just ended: the idle timeout and the park
		// deadline count from here.
		c.lastClosed()
	}
	c.mu.Unlock()
	return false, nil
}

// goodbye ends the connection gracefully: GOAWAY(NO_ERROR) with debug
// first unless one was sent, a flush, and a linger: it half-closes and
// reads what the client still sends for a short while, so that closing
// with unread input does not reset the connection before the client has
// read the GOAWAY.
func (c *Conn) goodbye(goAway bool, debug string) error {
	c.mu.Lock()
	c.ending = true
	if goAway {
		c.goAwayLocked(http2.ErrCodeNo, debug)
	}
	c.mu.Unlock()
	if c.flush() == nil {
		c.rd.linger()
	}
	return nil
}

// onGoAway: the client goes away; the connection ends once no stream is
// left (endpoint).
func (c *Conn) onGoAway(*http2.GoAwayFrame) error {
	c.mu.Lock()
	c.peerGoAway = true
	if len(c.streams) == 0 {
		c.finishLocked()
	}
	c.mu.Unlock()
	return nil
}

// idle: a stream id above any the client used (endpoint).
func (c *Conn) idle(id uint32) bool { return id > c.maxID }

// pingAck: the acknowledgement of Shutdown's PING sends the final GOAWAY
// (endpoint).
func (c *Conn) pingAck(data [8]byte) error {
	if data == shutdownPing {
		c.finalGoAway()
	}
	return nil
}

// peerReset bounds rapid reset (CVE-2023-44487): a stream reset before
// its response ended cost a handler for nothing (endpoint).
func (c *Conn) peerReset(st *stream) error {
	if !st.ended && !c.resets.take(1) {
		return connErr{http2.ErrCodeEnhanceYourCalm, "too many streams reset"}
	}
	return nil
}

// busy reports whether more than one stream's handler is running
// (endpoint).
func (c *Conn) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handlers > 1
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
		c.closeStream(&st.stream, &ResetError{StreamID: st.id, Code: code})
	}
	c.mu.Unlock()
	c.kick()
	st.recycle()
}
