package h2

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// ClientSettings bound what sluice accepts from an upstream on one
// connection. Zero fields take the defaults shown. A ClientSettings is read
// once, by NewClientConn.
type ClientSettings struct {
	// InitialWindow: 1 MiB, at least 65535 and at most 2^31-1. Each
	// stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE): how much of a
	// response body the server may send ahead of the reader. Not below
	// 65535 because the server may use that default until it has our
	// SETTINGS.
	InitialWindow uint32
	// ConnWindow: max(2×InitialWindow, 1 MiB), at most 2^31-1. The
	// connection's receive window, announced with a WINDOW_UPDATE after the
	// SETTINGS; above InitialWindow so that one unread stream cannot stall
	// the others.
	ConnWindow uint32
	// MaxHeaderList: 64 KiB. SETTINGS_MAX_HEADER_LIST_SIZE, enforced while
	// decoding: a response header block or trailers over it reset the
	// stream (PROTOCOL_ERROR); a block whose frames carry more than twice as
	// many bytes is a connection error.
	MaxHeaderList uint32
	// MaxFrameSize: 16 KiB, the largest frame accepted (16384 to 2^24-1).
	// Frames sent are bounded by the server's SETTINGS_MAX_FRAME_SIZE.
	MaxFrameSize uint32
	// WriteTimeout: 30 s. A write to the connection that cannot complete in
	// this long ends the connection, so that a server that stops reading
	// cannot hold the proxy's goroutines.
	WriteTimeout time.Duration
	// ErrorLog: nil, no logging. Receives connection errors at Debug.
	ErrorLog *slog.Logger
}

const (
	// initialMaxStreams is the server's concurrency limit assumed until its
	// SETTINGS arrives (RFC 9113 §6.5.2 recommends servers allow at least
	// 100; the Go Transport assumes the same).
	initialMaxStreams = 100
	// unlimitedStreams stands for a server whose SETTINGS sets no limit:
	// more streams than this on one connection only add head-of-line
	// blocking; the pool opens another.
	unlimitedStreams = 1000
	maxStreamID      = 1<<31 - 1
	maxInterim       = 16  // 1xx blocks on one stream
	maxGoAwayDebug   = 256 // bytes of GOAWAY debug data kept
)

func (s *ClientSettings) withDefaults() ClientSettings {
	var d ClientSettings
	if s != nil {
		d = *s
	}
	if d.InitialWindow == 0 {
		d.InitialWindow = 1 << 20
	}
	d.InitialWindow = min(max(d.InitialWindow, defaultWindow), maxWindow)
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
	if d.WriteTimeout <= 0 {
		d.WriteTimeout = 30 * time.Second
	}
	if d.ErrorLog == nil {
		d.ErrorLog = slog.New(slog.DiscardHandler)
	}
	return d
}

// clientLimits bound what a misbehaving server can make the client do; the
// server side's limits where they apply. Not settings: a test may lower them.
type clientLimits struct {
	glitchBurst, glitchRate float64 // frames that ask work and carry none
	glitchPerWork           float64 // given back per stream opened or DATA frame sent
	maxQueued               int     // answers queued while the server does not read
	maxBlockFrames          int     // frames in one header block
}

func defaultClientLimits(s *ClientSettings) clientLimits {
	return clientLimits{
		glitchBurst: 5000, glitchRate: 500, glitchPerWork: 4,
		maxQueued:      8192,
		maxBlockFrames: int(2*uint64(s.MaxHeaderList)/1024) + 2,
	}
}

// ClientConn is the client side of one HTTP/2 connection to an upstream.
// Make it with NewClientConn. All its methods may be called from any
// goroutine. It reads frames on a goroutine of its own until the
// connection ends; frames are written by the goroutine that has something
// to send, under one write lock, and what the reader owes the server
// (acknowledgements, WINDOW_UPDATE, RST_STREAM) is queued for the next
// writer, so the reader never waits for the server to read.
type ClientConn struct {
	nc   net.Conn
	s    ClientSettings
	lim  clientLimits
	log  *slog.Logger
	done chan struct{}

	// Owned by the reading goroutine.
	rd  connReader
	fr  *http2.Framer
	dec *hpack.Decoder
	blk clientBlock

	// The lock over what follows, the frames owed to the server and the
	// glitch budget (ctrl.go).
	ctrlQueue

	streams       map[uint32]*ClientStream // open and half-closed (§5.1)
	nextID        uint32
	maxStreams    uint32 // server's SETTINGS_MAX_CONCURRENT_STREAMS
	sawSettings   bool
	peerMaxList   uint32 // server's SETTINGS_MAX_HEADER_LIST_SIZE, 0: none
	peerTable     uint32 // server's SETTINGS_HEADER_TABLE_SIZE, for the encoder
	peerTableSet  bool
	sendWin       int64        // connection send window
	goAway        *GoAwayError // the server's GOAWAY, lowest last stream id seen
	shutdown      bool         // Shutdown called
	finishing     bool         // graceful close under way
	closed        bool
	userClosed    bool
	err           error // why the connection closed
	writeFailed   error
	idleSince     time.Time
	pingSeq       uint64
	pings         map[[8]byte]chan struct{}
	goAwayCode    http2.ErrCode // what our GOAWAY carries
	goAwayDebug   string
	goAwayPending bool

	// Write side; see clientwrite.go.
	waiting atomic.Int32
	wmu     sync.Mutex
	wb      *writeBuf
	henc    headerEncoder // the write lock guards it
	werr    error
}

// NewClientConn starts HTTP/2 on nc, already dialed, TLS done if any, with
// settings s (nil: defaults). It queues the client preface, SETTINGS and
// the connection's WINDOW_UPDATE, starts writing them, and starts the
// goroutine that reads frames. It does not wait for the server's SETTINGS:
// streams may open at once, within the RFC's initial assumptions (100
// concurrent streams until the server says otherwise, 65535-byte windows).
// The ClientConn owns nc from then on.
func NewClientConn(nc net.Conn, s *ClientSettings) *ClientConn {
	cc := &ClientConn{nc: nc, s: s.withDefaults(), done: make(chan struct{})}
	cc.lim = defaultClientLimits(&cc.s)
	cc.log = cc.s.ErrorLog
	cc.rd = newConnReader(cc, nc, nil)
	cc.nextID = 1
	cc.maxStreams = initialMaxStreams
	cc.send = newSender()
	cc.recv = newReceiver(cc.s.ConnWindow, cc.s.InitialWindow)
	cc.idleSince = time.Now()
	cc.glitches = newBudget(cc.lim.glitchBurst, cc.lim.glitchRate)
	// The preface (§3.4) is queued first, so every writer writes it first.
	cc.queue = append(cc.queue, ctrl{kind: cSettings})
	if cc.s.ConnWindow > defaultWindow {
		cc.queue = append(cc.queue, ctrl{kind: cWindow, val: cc.s.ConnWindow - defaultWindow})
	}
	cc.kick()
	go cc.readLoop()
	return cc
}

// OpenStream sends a request header block (HEADERS, and CONTINUATION as
// the server's SETTINGS_MAX_FRAME_SIZE requires) on a new stream; end sets
// END_STREAM (a request without body). The fields are checked as the
// server side checks requests (RFC 9113 §8.2, §8.3: lowercase names, no
// connection-specific field, pseudo-header fields first...).
//
// It fails with nothing sent, and NotProcessed true, when the connection is
// going away (ErrGoingAway) or closed (ErrConnClosed), when as many streams
// are open as the server allows (ErrNoCapacity: open another connection),
// or when the fields are invalid or over the server's
// SETTINGS_MAX_HEADER_LIST_SIZE (ErrInvalidRequest). It blocks only while
// another goroutine writes, which WriteTimeout bounds.
func (cc *ClientConn) OpenStream(fields []hpack.HeaderField, end bool) (*ClientStream, error) {
	cs, _, err := cc.OpenStreamBody(fields, nil, end)
	return cs, err
}

// OpenStreamBody is OpenStream with the start of the request body: as
// much of body as the send windows allow now goes in DATA frames right
// after the header block, in the same write to the connection, with
// END_STREAM on the last when end is set and all of body went. It never
// waits for credit. It returns the stream and how many bytes of body were
// sent; the rest is for Write, WriteLast or WriteTrailers. A small request
// (a gRPC call) thus leaves in one write, not one for its head, one for
// its body and one for its end.
func (cc *ClientConn) OpenStreamBody(fields []hpack.HeaderField, body []byte, end bool) (*ClientStream, int, error) {
	var fc fieldCheck
	fc.reset(false)
	var size uint64
	for _, f := range fields {
		fc.field(f)
		size += uint64(f.Size())
	}
	if bad := fc.finish(); bad != "" {
		return nil, 0, &notSentError{errors.Join(ErrInvalidRequest, errors.New("h2: request fields: "+bad))}
	}
	wb, err := cc.lockWrite()
	if err != nil {
		return nil, 0, &notSentError{ErrConnClosed}
	}
	cc.mu.Lock()
	switch {
	case cc.closed:
		err = ErrConnClosed
	case cc.goAway != nil || cc.shutdown || cc.nextID > maxStreamID:
		err = ErrGoingAway
	case len(cc.streams) >= int(cc.maxStreams):
		err = ErrNoCapacity
	case cc.peerMaxList != 0 && size > uint64(cc.peerMaxList):
		// §10.5.1: the server would refuse it; better not to send it.
		err = errors.Join(ErrInvalidRequest, errors.New("h2: request header list over the server's limit"))
	}
	if err != nil {
		cc.mu.Unlock()
		cc.unlockWrite(false)
		return nil, 0, &notSentError{err}
	}
	cs := &ClientStream{
		cc: cc, inbound: inbound{id: cc.nextID}, head: fc.method == "HEAD",
		done: make(chan struct{}),
	}
	cs.recvWin = int64(cc.s.InitialWindow)
	cs.sendWin = cc.send.peerWindow
	cs.length = -1
	cc.nextID += 2
	if cc.streams == nil {
		cc.streams = make(map[uint32]*ClientStream)
	}
	cc.streams[cs.id] = cs
	cc.glitches.give(cc.lim.glitchPerWork)
	cc.mu.Unlock()

	err = cc.writeBlock(wb, cs.id, fields, end && len(body) == 0)
	if err == nil && end && len(body) == 0 {
		cc.mu.Lock()
		cc.endLocal(cs)
		cc.mu.Unlock()
	}
	sent := 0
	for err == nil && sent < len(body) {
		cc.mu.Lock()
		n := cc.take(&cs.outbound, len(body)-sent)
		cc.mu.Unlock()
		if n == 0 {
			break
		}
		err = cc.writeData(wb, cs, body[sent:sent+n], end && sent+n == len(body), n)
		sent += n
	}
	if uerr := cc.unlockWrite(false); err == nil {
		err = uerr
	}
	if err != nil {
		// The write failed part way: what reached the server is unknown,
		// and the connection is being closed.
		return nil, 0, err
	}
	return cs, sent, nil
}

// Available reports how many more streams OpenStream would accept now: 0
// once the connection is going away or closed.
func (cc *ClientConn) Available() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed || cc.goAway != nil || cc.shutdown || cc.nextID > maxStreamID {
		return 0
	}
	n := int(cc.maxStreams) - len(cc.streams)
	if left := int((maxStreamID-cc.nextID)/2) + 1; n > left {
		n = left
	}
	return max(n, 0)
}

// Active reports how many streams are open (including half-closed ones,
// which count toward the server's limit).
func (cc *ClientConn) Active() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return len(cc.streams)
}

// IdleSince reports, when no stream is open and the connection is not
// closed, since when: the end of the last stream, or the connection's start.
func (cc *ClientConn) IdleSince() (time.Time, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed || len(cc.streams) > 0 {
		return time.Time{}, false
	}
	return cc.idleSince, true
}

// Err reports why OpenStream would fail now: nil while the connection is
// usable; a *GoAwayError (StreamID 0) after the server's GOAWAY, whose
// Graceful tells a deploy from a failure; ErrGoingAway after Shutdown;
// once closed, what closed it (ErrConnClosed after Close, or an error that
// matches ErrConnClosed and carries the cause: a *ConnError for a protocol
// error detected here, io.EOF, a network error).
func (cc *ClientConn) Err() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	switch {
	case cc.goAway != nil:
		ga := *cc.goAway
		return &ga
	case cc.closed:
		return cc.err
	case cc.shutdown:
		return ErrGoingAway
	}
	return nil
}

// Close closes the connection at once, without GOAWAY; open streams fail
// with ErrConnClosed. Done is closed once the reading goroutine has ended.
func (cc *ClientConn) Close() error {
	cc.mu.Lock()
	if !cc.closed {
		cc.userClosed = true
	}
	cc.mu.Unlock()
	cc.closeConn(ErrConnClosed)
	return nil
}

// Shutdown closes the connection gracefully: no new stream, GOAWAY with
// NO_ERROR, and the close once no stream is open. It does not wait.
func (cc *ClientConn) Shutdown() {
	cc.mu.Lock()
	if cc.shutdown || cc.closed {
		cc.mu.Unlock()
		return
	}
	cc.shutdown = true
	cc.queueGoAwayLocked(http2.ErrCodeNo, "")
	if len(cc.streams) == 0 {
		cc.finishLocked()
	}
	cc.mu.Unlock()
	cc.kick()
}

// Done returns a channel closed when the connection is gone: closed, and
// its reading goroutine ended.
func (cc *ClientConn) Done() <-chan struct{} { return cc.done }

// Ping sends a PING and waits for its acknowledgement (RFC 9113 §6.7, §8.7:
// a check of an idle connection that sends no request), until ctx ends or
// the connection closes. Mind that gRPC servers limit PINGs (reference §4).
func (cc *ClientConn) Ping(ctx context.Context) error {
	cc.mu.Lock()
	if cc.closed {
		cc.mu.Unlock()
		return ErrConnClosed
	}
	cc.pingSeq++
	var data [8]byte
	binary.BigEndian.PutUint64(data[:], cc.pingSeq)
	ch := make(chan struct{})
	if cc.pings == nil {
		cc.pings = make(map[[8]byte]chan struct{})
	}
	cc.pings[data] = ch
	cc.queue = append(cc.queue, ctrl{kind: cPing, data: data})
	cc.mu.Unlock()
	cc.kick()
	select {
	case <-ch:
		return nil
	case <-cc.done:
		return ErrConnClosed
	case <-ctx.Done():
		cc.mu.Lock()
		delete(cc.pings, data)
		cc.mu.Unlock()
		return ctx.Err()
	}
}

// queueGoAwayLocked queues our GOAWAY once. Its last stream id is 0: the
// server opens no stream (push is refused).
func (cc *ClientConn) queueGoAwayLocked(code http2.ErrCode, debug string) {
	if cc.goAwayPending {
		return
	}
	cc.goAwayPending = true
	cc.goAwayCode, cc.goAwayDebug = code, debug
	cc.queue = append(cc.queue, ctrl{kind: cGoAway, val: uint32(code)})
}

// finishLocked starts the graceful close: flush what is queued, then close.
func (cc *ClientConn) finishLocked() {
	if cc.finishing || cc.closed {
		return
	}
	cc.finishing = true
	go func() {
		if _, err := cc.lockWrite(); err == nil {
			cc.unlockWrite(true)
		}
		cc.closeConn(ErrConnClosed)
	}()
}

// closeConn ends the connection for cause: every open stream fails, the
// socket closes (which ends the reading goroutine). It may be called more
// than once; the first cause stays.
func (cc *ClientConn) closeConn(cause error) {
	if cc.failStreams(cause) {
		cc.nc.Close()
	}
}

// failStreams marks the connection closed for cause and fails every open
// stream; it reports whether it did, the first time.
func (cc *ClientConn) failStreams(cause error) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed {
		return false
	}
	cc.closed = true
	if cc.userClosed || cause == ErrConnClosed {
		cc.err = ErrConnClosed
	} else {
		cc.err = &closedError{cause}
	}
	for _, cs := range cc.streams {
		cc.closeStream(cs, cc.lostErr(cs))
	}
	return true
}

// lostErr is the error of cs when the connection ends before it did.
func (cc *ClientConn) lostErr(cs *ClientStream) error {
	if ga := cc.goAway; ga != nil {
		// §6.8: at or below the last id, it may have been processed.
		return &GoAwayError{StreamID: cs.id, LastStreamID: ga.LastStreamID, Code: ga.Code, Debug: ga.Debug}
	}
	return cc.err
}

// readLoop reads frames until the connection ends, then fails what is left.
func (cc *ClientConn) readLoop() {
	defer close(cc.done)
	cc.dec = hpack.NewDecoder(4096, cc.onField)
	cc.dec.SetMaxStringLength(int(cc.s.MaxHeaderList))
	cc.fr = http2.NewFramer(nil, &cc.rd)
	cc.fr.SetMaxReadFrameSize(cc.s.MaxFrameSize)
	cc.fr.SetReuseFrames() // as the server's Framer (newReadFramer)
	err := cc.readFrames()
	cc.mu.Lock()
	if cc.writeFailed != nil {
		err = cc.writeFailed
	}
	cc.mu.Unlock()
	var ce *ConnError
	if errors.As(err, &ce) && cc.failStreams(err) {
		// Streams fail first: the linger is for the server's sake.
		cc.rd.linger()
	}
	cc.closeConn(err)
	cc.nc.Close()
	cc.rd.release()
}

func (cc *ClientConn) readFrames() error {
	for {
		err := cc.readFrame()
		if err == nil {
			continue
		}
		switch e := err.(type) {
		case clientStreamErr:
			if ce := cc.resetByEngine(e); ce != nil {
				return cc.connFail(*ce)
			}
			continue
		case streamErr:
			if ce := cc.resetByEngine(clientStreamErr{e.id, e.code, ""}); ce != nil {
				return cc.connFail(*ce)
			}
			continue
		case connErr:
			return cc.connFail(e)
		}
		return err
	}
}

// clientStreamErr is a stream error found reading the server's frames, with
// the reason the stream's ResetError will carry.
type clientStreamErr struct {
	id     uint32
	code   http2.ErrCode
	reason string
}

func (e clientStreamErr) Error() string { return e.reason }

func (cc *ClientConn) readFrame() error {
	fh, err := cc.fr.ReadFrameHeader()
	if err != nil {
		if cc.rd.err != nil {
			return cc.rd.err
		}
		if err == http2.ErrFrameTooLarge {
			return connErr{http2.ErrCodeFrameSize, "frame too large"} // §4.2
		}
		return frameError(cc.fr, err, fh)
	}
	f, err := cc.fr.ReadFrameForHeader(fh)
	if err != nil {
		if cc.rd.err != nil {
			return cc.rd.err
		}
		return frameError(cc.fr, err, fh)
	}
	if !cc.sawSettings {
		// §3.4: the server preface is a SETTINGS frame.
		if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
			return connErr{http2.ErrCodeProtocol, "first frame is not SETTINGS"}
		}
	}
	return cc.process(f)
}

// connFail ends the connection on a connection error found here: GOAWAY
// with the code, then close (§5.4.1).
func (cc *ClientConn) connFail(e connErr) error {
	err := &ConnError{Code: e.code, Reason: e.reason}
	cc.log.Debug("h2: upstream connection error", "remote", cc.nc.RemoteAddr(), "code", e.code, "reason", e.reason)
	cc.mu.Lock()
	overflow := len(cc.queue) > cc.lim.maxQueued
	cc.goAwayPending = false // this GOAWAY's code wins over a graceful one not yet sent
	cc.queueGoAwayLocked(e.code, e.reason)
	cc.mu.Unlock()
	if !overflow {
		if _, werr := cc.lockWrite(); werr == nil {
			cc.unlockWrite(true)
		}
	}
	return err
}

// isIdle reports whether id names a stream that never was: even ids (the
// server may open none: push is refused) and ids not yet used (§5.1).
func (cc *ClientConn) isIdle(id uint32) bool {
	return id%2 == 0 || id >= cc.nextID
}

func (cc *ClientConn) answer(x ctrl) error { return cc.enqueue(x, cc.lim.maxQueued) }

func (cc *ClientConn) process(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return cc.onData(f)
	case *http2.HeadersFrame:
		return cc.onHeaders(f)
	case *http2.ContinuationFrame:
		return cc.feed(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.SettingsFrame:
		return cc.onSettings(f)
	case *http2.PingFrame:
		return cc.onPing(f)
	case *http2.WindowUpdateFrame:
		return cc.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return cc.onReset(f)
	case *http2.GoAwayFrame:
		return cc.onGoAway(f)
	case *http2.PushPromiseFrame:
		// §8.4: we sent SETTINGS_ENABLE_PUSH 0.
		return connErr{http2.ErrCodeProtocol, "PUSH_PROMISE with push disabled"}
	case *http2.PriorityFrame:
		return cc.glitch(1) // §5.3.2: deprecated, ignored
	}
	return cc.glitch(1) // §4.1, §5.5: unknown frame types are ignored
}

func (cc *ClientConn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if err := cc.glitch(1); err != nil {
		return err
	}
	cc.mu.Lock()
	first := !cc.sawSettings
	cc.sawSettings = true
	sawMax := false
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingEnablePush:
			if s.Val != 0 { // §6.5.2: a server MUST NOT set it to 1
				return connErr{http2.ErrCodeProtocol, "SETTINGS_ENABLE_PUSH from a server"}
			}
		case http2.SettingMaxConcurrentStreams:
			cc.maxStreams, sawMax = s.Val, true
		case http2.SettingHeaderTableSize:
			cc.peerTable, cc.peerTableSet = s.Val, true
		case http2.SettingInitialWindowSize:
			// §6.9.2: the change applies to every open stream's window,
			// which may go negative, and must not pass 2^31-1.
			delta := int64(s.Val) - cc.send.peerWindow
			cc.send.peerWindow = int64(s.Val)
			for _, cs := range cc.streams {
				if !cc.resize(&cs.outbound, delta) {
					return connErr{http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a window"}
				}
			}
		case http2.SettingMaxFrameSize:
			cc.send.peerMaxFrame = s.Val
		case http2.SettingMaxHeaderListSize:
			cc.peerMaxList = s.Val
		}
		return nil
	})
	if first && !sawMax {
		// §6.5.2: no limit; see unlimitedStreams.
		cc.maxStreams = unlimitedStreams
	}
	cc.mu.Unlock()
	var ce http2.ConnectionError
	var ie connErr
	switch {
	case errors.As(err, &ie):
		return ie
	case errors.As(err, &ce):
		return connErr{http2.ErrCode(ce), "invalid SETTINGS value"}
	case err != nil:
		return connErr{http2.ErrCodeProtocol, "invalid SETTINGS"}
	}
	return cc.answer(ctrl{kind: cSettingsAck})
}

func (cc *ClientConn) onPing(f *http2.PingFrame) error {
	if f.IsAck() {
		cc.mu.Lock()
		ch := cc.pings[f.Data]
		delete(cc.pings, f.Data)
		cc.mu.Unlock()
		if ch != nil {
			close(ch)
			return nil
		}
		return cc.glitch(1) // an acknowledgement of nothing
	}
	if err := cc.glitch(1); err != nil {
		return err
	}
	return cc.answer(ctrl{kind: cPingAck, data: f.Data})
}

func (cc *ClientConn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	if err := cc.glitch(1); err != nil {
		return err
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		if !cc.creditConn(inc) { // §6.9.1
			return connErr{http2.ErrCodeFlowControl, "connection window over 2^31-1"}
		}
		for _, cs := range cc.streams {
			if cs.wantCredit {
				poke(cs.wwake)
			}
		}
		return nil
	}
	if cc.isIdle(f.StreamID) {
		return connErr{http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream"} // §5.1
	}
	cs := cc.streams[f.StreamID]
	if cs == nil {
		return nil // §5.1: may arrive after the stream closed
	}
	if !cc.credit(&cs.outbound, inc) {
		return clientStreamErr{cs.id, http2.ErrCodeFlowControl, "stream window over 2^31-1"}
	}
	return nil
}

func (cc *ClientConn) onReset(f *http2.RSTStreamFrame) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.isIdle(f.StreamID) {
		return connErr{http2.ErrCodeProtocol, "RST_STREAM on an idle stream"} // §6.4
	}
	if cs := cc.streams[f.StreamID]; cs != nil {
		cc.closeStream(cs, &ResetError{StreamID: cs.id, Code: f.ErrCode, Remote: true, answered: cs.answered()})
	}
	return nil
}

func (cc *ClientConn) onGoAway(f *http2.GoAwayFrame) error {
	debug := f.DebugData()
	if len(debug) > maxGoAwayDebug {
		debug = debug[:maxGoAwayDebug]
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	last := f.LastStreamID
	if cc.goAway != nil && cc.goAway.LastStreamID < last {
		// §6.8: the id must not increase; the lower one stands, since
		// streams above it may already have been retried elsewhere.
		last = cc.goAway.LastStreamID
	}
	cc.goAway = &GoAwayError{LastStreamID: last, Code: f.ErrCode, Debug: string(debug)}
	if f.ErrCode != http2.ErrCodeNo {
		cc.log.Debug("h2: upstream GOAWAY", "remote", cc.nc.RemoteAddr(), "code", f.ErrCode, "debug", string(debug))
	}
	for id, cs := range cc.streams {
		if id > last {
			// §6.8: never processed and never will be; no RST_STREAM
			// needed, the server ignores the stream.
			cc.closeStream(cs, &GoAwayError{StreamID: id, LastStreamID: last, Code: f.ErrCode, Debug: string(debug), answered: cs.answered()})
		}
	}
	if len(cc.streams) == 0 {
		cc.finishLocked()
	}
	return nil
}

func (cc *ClientConn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Length)
	data := f.Data()
	if len(data) == 0 && !f.StreamEnded() {
		if err := cc.glitch(1); err != nil {
			return err
		}
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	// §6.9: every DATA counts against the connection window, whatever its
	// stream's state, padding included.
	if n > cc.recv.recvWin {
		return connErr{http2.ErrCodeFlowControl, "connection window exceeded"}
	}
	cc.recv.recvWin -= n
	if cc.isIdle(id) {
		return connErr{http2.ErrCodeProtocol, "DATA on an idle stream"} // §5.1
	}
	cs := cc.streams[id]
	if cs == nil {
		// Closed: frames in flight when we reset it, or after a stream
		// error. Counted, given back, dropped.
		cc.returnConn(n)
		return nil
	}
	if cs.remoteEnded {
		cc.returnConn(n)
		return clientStreamErr{id, http2.ErrCodeStreamClosed, "DATA after END_STREAM"} // §5.1
	}
	if n > cs.recvWin {
		cc.returnConn(n)
		return clientStreamErr{id, http2.ErrCodeFlowControl, "stream window exceeded"} // §6.9.1
	}
	cs.recvWin -= n
	if pad := n - int64(len(data)); pad > 0 {
		cc.consumed(&cs.inbound, pad)
	}
	if !cs.final {
		cc.returnConn(int64(len(data)))
		return clientStreamErr{id, http2.ErrCodeProtocol, "DATA before the final response header block"} // §8.1
	}
	cs.received += int64(len(data))
	switch {
	case cs.noContent && len(data) > 0:
		// RFC 9110 §6.4.1: HEAD, 204 and 304 responses have no content.
		cc.returnConn(int64(len(data)))
		return clientStreamErr{id, http2.ErrCodeProtocol, "content in a response that has none"}
	case cs.length >= 0 && cs.received > cs.length:
		cc.returnConn(int64(len(data)))
		return clientStreamErr{id, http2.ErrCodeProtocol, "DATA beyond content-length"} // §8.1.1
	}
	if len(data) > 0 {
		cs.buf = append(cs.buf, data...)
		poke(cs.rwake)
	}
	if f.StreamEnded() {
		return cc.remoteEnd(cs)
	}
	return nil
}

// remoteEnd moves cs to half-closed (remote), or closed.
func (cc *ClientConn) remoteEnd(cs *ClientStream) error {
	if !cs.noContent && cs.length >= 0 && cs.received != cs.length {
		return clientStreamErr{cs.id, http2.ErrCodeProtocol, "DATA shorter than content-length"} // §8.1.1
	}
	cs.remoteEnded = true
	poke(cs.rwake)
	if cs.ended {
		cc.closeStream(cs, nil)
	}
	return nil
}

// resetByEngine answers a stream error with RST_STREAM (§5.4.2); the
// stream's methods then fail with a *ResetError carrying the reason.
func (cc *ClientConn) resetByEngine(e clientStreamErr) *connErr {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.isIdle(e.id) {
		return &connErr{e.code, "stream error on an idle stream"} // §5.1: no RST_STREAM on idle
	}
	if cs := cc.streams[e.id]; cs != nil {
		cc.closeStream(cs, &ResetError{StreamID: e.id, Code: e.code, Reason: e.reason})
	}
	cc.queue = append(cc.queue, ctrl{kind: cRST, id: e.id, val: uint32(e.code)})
	if len(cc.queue) > cc.lim.maxQueued {
		return &connErr{http2.ErrCodeEnhanceYourCalm, "too many queued frames"}
	}
	return nil
}

// closeStream moves cs to closed for err: nil when both sides ended, the
// reason otherwise. A response that had ended stays readable; otherwise
// what was buffered is dropped. Either way the bytes buffered go back to
// the connection's window now, so that a stream nobody reads to its end
// cannot shrink it for the others. cc.mu is held.
func (cc *ClientConn) closeStream(cs *ClientStream, err error) {
	if cs.closed {
		return
	}
	// A response that ended before the reset is read whole.
	cc.closeInbound(&cs.inbound, err, cs.remoteEnded)
	delete(cc.streams, cs.id)
	close(cs.done)
	poke(cs.wwake)
	if len(cc.streams) == 0 {
		cc.idleSince = time.Now()
		if cc.goAway != nil || cc.shutdown {
			cc.finishLocked()
		}
	}
}

// endLocal notes END_STREAM sent: half-closed (local), or closed. cc.mu is
// held.
func (cc *ClientConn) endLocal(cs *ClientStream) {
	cs.ended = true
	if cs.remoteEnded {
		cc.closeStream(cs, nil)
	}
}
