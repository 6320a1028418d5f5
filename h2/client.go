package h2

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/internal/clock"
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
	maxInterim       = 16  // 1xx blocks on one stream
	maxGoAwayDebug   = 256 // bytes of GOAWAY debug data kept
)

// config is what ClientSettings has of the settings both ends have. A
// stream window is at least 65535 because the server may use that default
// until it has our SETTINGS.
func (s *ClientSettings) config() config {
	var d ClientSettings
	if s != nil {
		d = *s
	}
	return config{d.InitialWindow, d.ConnWindow, d.MaxHeaderList, d.MaxFrameSize, d.WriteTimeout, d.ErrorLog}.defaults(defaultWindow)
}

// ClientConn is the client side of one HTTP/2 connection to an upstream.
// Make it with NewClientConn. All its methods may be called from any
// goroutine. It reads frames on a goroutine of its own until the
// connection ends; frames are written by the goroutine that has something
// to send, under one write lock, and what the reader owes the server
// (acknowledgements, WINDOW_UPDATE, RST_STREAM) is queued for the next
// writer, so the reader never waits for the server to read.
type ClientConn struct {
	core
	done chan struct{}

	resp fieldCheck // the response header block being read; owned by the reader

	// Guarded by core.mu.
	//
	// decoding is the stream whose response header block the reader is
	// decoding into the stream's own room (ClientStream.inline), outside
	// the lock: a stream released meanwhile is recycled only once the
	// block ends (ClientConn.recycle).
	decoding   *ClientStream
	nextID     uint32
	peerGoAway *GoAwayError // the server's GOAWAY, lowest last stream id seen
	finishing  bool         // graceful close under way
	err        error        // why the connection closed
	idleSince  time.Time
	pingSeq    uint64
	pings      map[[8]byte]chan struct{}
}

// NewClientConn starts HTTP/2 on nc, already dialed, TLS done if any, with
// settings s (nil: defaults). It queues the client preface, SETTINGS and
// the connection's WINDOW_UPDATE, starts writing them, and starts the
// goroutine that reads frames. It does not wait for the server's SETTINGS:
// streams may open at once, within the RFC's initial assumptions (100
// concurrent streams until the server says otherwise, 65535-byte windows).
// The ClientConn owns nc from then on.
func NewClientConn(nc net.Conn, s *ClientSettings) *ClientConn {
	cc := &ClientConn{done: make(chan struct{}), nextID: 1, idleSince: time.Now()}
	cc.init(cc, true, nc, nil, s.config(), 0)
	cc.peerStreams = initialMaxStreams
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
	size, bad := fc.check(fields, false)
	if bad != "" {
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
	case cc.peerGoAway != nil || cc.shutdown || cc.nextID > maxStreamID:
		err = ErrGoingAway
	case len(cc.streams) >= int(cc.peerStreams):
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
	cs := newClientStream(cc, fc.method == "HEAD")
	cc.open(&cs.stream, cc.nextID)
	cs.sentHead = true
	cc.nextID += 2
	if cc.streams == nil {
		cc.streams = make(map[uint32]peer)
	}
	cc.streams[cs.id] = cs
	cc.glitches.give(glitchPerWork)
	cc.mu.Unlock()

	err = cc.writeBlock(wb, cs.id, fields, end && len(body) == 0)
	if err == nil && end && len(body) == 0 {
		cc.mu.Lock()
		cc.endLocal(&cs.stream)
		cc.mu.Unlock()
	}
	sent := 0
	for err == nil && sent < len(body) {
		cc.mu.Lock()
		n := cc.take(&cs.stream, len(body)-sent)
		cc.mu.Unlock()
		if n == 0 {
			break
		}
		err = cc.writeData(wb, &cs.stream, body[sent:sent+n], end && sent+n == len(body), n)
		sent += n
	}
	if uerr := cc.unlockWrite(false); err == nil {
		err = uerr
	}
	if err != nil {
		// The write failed part way: what reached the server is unknown,
		// and the connection is being closed. Nobody else has the stream.
		cs.Release()
		return nil, 0, err
	}
	return cs, sent, nil
}

// Available reports how many more streams OpenStream would accept now: 0
// once the connection is going away or closed.
func (cc *ClientConn) Available() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed || cc.peerGoAway != nil || cc.shutdown || cc.nextID > maxStreamID {
		return 0
	}
	n := int(cc.peerStreams) - len(cc.streams)
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
	case cc.peerGoAway != nil:
		ga := *cc.peerGoAway
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
	if !cc.beginShutdown() {
		return
	}
	if !cc.goAway {
		cc.goAwayLocked(http2.ErrCodeNo, "") // its last stream id is 0: push is refused
	}
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

// finishLocked starts the graceful close: flush what is queued, then close.
func (cc *ClientConn) finishLocked() {
	if cc.finishing || cc.closed {
		return
	}
	cc.finishing = true
	go func() {
		cc.flush()
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
	for _, p := range cc.streams {
		st := p.base()
		cc.closeStream(st, cc.lostErr(st))
	}
	return true
}

// lostErr is the error of st when the connection ends before it did.
func (cc *ClientConn) lostErr(st *stream) error {
	if ga := cc.peerGoAway; ga != nil {
		// §6.8: at or below the last id, it may have been processed.
		return &GoAwayError{StreamID: st.id, LastStreamID: ga.LastStreamID, Code: ga.Code, Debug: ga.Debug}
	}
	return cc.err
}

// readLoop reads frames until the connection ends, then fails what is left.
func (cc *ClientConn) readLoop() {
	defer close(cc.done)
	cc.startReading()
	err := cc.readFrames()
	cc.mu.Lock()
	if cc.writeFailed != nil {
		err = cc.writeFailed
	}
	if cs := cc.decoding; cs != nil {
		// A header block cut short: nothing decodes into cs any more.
		cc.decoding, cc.blk.fields = nil, nil
		cc.recycle(cs)
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
		err := cc.next()
		if err == nil {
			continue
		}
		if e, ok := err.(connErr); ok {
			cc.log.Debug("h2: upstream connection error", "remote", cc.nc.RemoteAddr(), "code", e.code, "reason", e.reason)
			ce, _ := cc.connFail(e)
			return ce
		}
		return err
	}
}

// idle reports whether id names a stream that never was: even ids (the
// server may open none: push is refused) and ids not yet used (§5.1)
// (endpoint).
func (cc *ClientConn) idle(id uint32) bool {
	return id%2 == 0 || id >= cc.nextID
}

// pingAck wakes the Ping waiting for it; an acknowledgement of nothing
// is charged (endpoint).
func (cc *ClientConn) pingAck(data [8]byte) error {
	cc.mu.Lock()
	ch := cc.pings[data]
	delete(cc.pings, data)
	cc.mu.Unlock()
	if ch != nil {
		close(ch)
		return nil
	}
	return cc.glitch(1)
}

// peerReset: a server's resets cost the client nothing to bound
// (endpoint).
func (cc *ClientConn) peerReset(*stream) error { return nil }

// lastClosed notes the idle time, and ends a connection going away
// (endpoint).
func (cc *ClientConn) lastClosed() {
	cc.idleSince = clock.Now()
	if cc.peerGoAway != nil || cc.shutdown {
		cc.finishLocked()
	}
}

// busy: a client's writers are its callers' goroutines, whose timing it
// does not know; it flushes at once (endpoint).
func (cc *ClientConn) busy() bool { return false }

// timedOut: a client connection's reads time out only to end it
// (endpoint).
func (cc *ClientConn) timedOut(bool) onTimeout { return failRead }

// onGoAway takes the server's GOAWAY: streams above its last stream id
// fail, not processed; the connection ends once no stream is left
// (endpoint).
func (cc *ClientConn) onGoAway(f *http2.GoAwayFrame) error {
	debug := f.DebugData()
	if len(debug) > maxGoAwayDebug {
		debug = debug[:maxGoAwayDebug]
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	last := f.LastStreamID
	if cc.peerGoAway != nil && cc.peerGoAway.LastStreamID < last {
		// §6.8: the id must not increase; the lower one stands, since
		// streams above it may already have been retried elsewhere.
		last = cc.peerGoAway.LastStreamID
	}
	cc.peerGoAway = &GoAwayError{LastStreamID: last, Code: f.ErrCode, Debug: string(debug)}
	if f.ErrCode != http2.ErrCodeNo {
		cc.log.Debug("h2: upstream GOAWAY", "remote", cc.nc.RemoteAddr(), "code", f.ErrCode, "debug", string(debug))
	}
	for id, p := range cc.streams {
		if id > last {
			// §6.8: never processed and never will be; no RST_STREAM
			// needed, the server ignores the stream.
			st := p.base()
			cc.closeStream(st, &GoAwayError{StreamID: id, LastStreamID: last, Code: f.ErrCode, Debug: string(debug), answered: st.answered})
		}
	}
	if len(cc.streams) == 0 {
		cc.finishLocked()
	}
	return nil
}
