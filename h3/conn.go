// Package h3 speaks HTTP/3 (RFC 9114) to clients on a QUIC connection of
// quic-go: the control streams and their SETTINGS and GOAWAY, the QPACK
// streams (RFC 9204), and request streams, each read as a field section,
// a body of DATA frames and trailers, and answered with frames. Field
// sections are coded with github.com/quic-go/qpack, with the static table
// only: sluice announces a dynamic table of capacity 0, so a client can
// make it keep no state for its header blocks. It uses nothing of
// net/http: the proxy maps a Stream onto its own exchange.
//
// A Conn accepts streams on the goroutine that calls Serve and runs its
// handler on a goroutine per request stream. The number of those is bounded
// by the QUIC listener's MaxIncomingStreams with RequireStreamCreditRelease
// (QUICConfig): a stream's credit goes back to the client only when its
// handler has returned, so a client that resets its streams at once cannot
// have more handlers running than the limit (the HTTP/2 rapid reset,
// CVE-2023-44487), and one that keeps doing it is closed with
// H3_EXCESSIVE_LOAD.
package h3

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
)

// Settings bound what a client may do on one connection. Zero fields take
// the defaults shown. A Settings is read once, by NewConn.
type Settings struct {
	// MaxConcurrentStreams: 100. The request streams a client may have
	// open at once (QUIC's MAX_STREAMS, set in QUICConfig), the streams
	// whose handlers still run included.
	MaxConcurrentStreams int
	// MaxHeaderList: 64 KiB. SETTINGS_MAX_FIELD_SECTION_SIZE, enforced
	// while decoding: a request over it is answered 431 (and never
	// reaches the handler), trailers over it reset the stream.
	MaxHeaderList int
	// IdleTimeout: 30 s. QUIC's idle timeout (QUICConfig): a connection
	// that has no packet either way for this long is gone.
	IdleTimeout time.Duration
	// HeaderTimeout: 10 s. A request stream whose field section has not
	// come whole this long after the stream opened is reset.
	HeaderTimeout time.Duration
	// ErrorLog: nil, no logging. Receives handler panics and connection
	// errors at debug level.
	ErrorLog *slog.Logger
}

func (s *Settings) withDefaults() Settings {
	var d Settings
	if s != nil {
		d = *s
	}
	if d.MaxConcurrentStreams <= 0 {
		d.MaxConcurrentStreams = 100
	}
	if d.MaxHeaderList <= 0 {
		d.MaxHeaderList = 64 << 10
	}
	if d.IdleTimeout <= 0 {
		d.IdleTimeout = 30 * time.Second
	}
	if d.HeaderTimeout <= 0 {
		d.HeaderTimeout = 10 * time.Second
	}
	return d
}

// QUICConfig returns the quic-go config a listener serving HTTP/3 under s
// needs: the stream limits (bidirectional ones released by the Conn only
// when their handler returns; three unidirectional ones for the control
// and QPACK streams, and a few more for extensions), the idle timeout,
// and 0-RTT when allow0RTT.
func QUICConfig(s *Settings, allow0RTT bool) *quic.Config {
	d := s.withDefaults()
	return &quic.Config{
		MaxIncomingStreams:         int64(d.MaxConcurrentStreams),
		MaxIncomingUniStreams:      8,
		RequireStreamCreditRelease: true,
		MaxIdleTimeout:             d.IdleTimeout,
		Allow0RTT:                  allow0RTT,
	}
}

// ALPN is HTTP/3's ALPN protocol identifier (RFC 9114 §3.1).
const ALPN = "h3"

// Conn is the server side of one HTTP/3 connection.
type Conn struct {
	qc    *quic.Conn
	s     Settings
	serve func(*Stream)

	ctrlMu sync.Mutex
	ctrl   *quic.SendStream // sluice's control stream

	mu        sync.Mutex
	nextID    uint64 // the id after the highest request stream accepted
	goingAway bool
	goAwayID  uint64
	active    int // handlers running
	streams   int // request streams served
	resets    int // of them, those the client reset before the response ended
	closed    bool
	idle      chan struct{} // closed when going away with no handler left

	peer     settings
	peerSeen bool
	uni      [4]bool // the peer's control, push, encoder and decoder streams, once opened
}

// NewConn returns the HTTP/3 side of qc, whose request streams serve runs
// on, each on a goroutine of its own. serve must read the request and
// write the response; the stream is ended (FIN, or a reset when the
// response did not end) and its credit released when it returns.
func NewConn(qc *quic.Conn, s *Settings, serve func(*Stream)) *Conn {
	return &Conn{qc: qc, s: s.withDefaults(), serve: serve, idle: make(chan struct{})}
}

// QUIC returns the QUIC connection.
func (c *Conn) QUIC() *quic.Conn { return c.qc }

// Serve opens sluice's control stream with its SETTINGS, then accepts the
// client's streams until the connection ends, or until Shutdown's GOAWAY
// and the last request it let through have ended, when it closes the
// connection with H3_NO_ERROR. It returns the error that ended the
// connection, nil after a graceful close.
func (c *Conn) Serve() error {
	ctrl, err := c.qc.OpenUniStream()
	if err != nil {
		return err
	}
	b := quicvarint.Append(nil, streamControl)
	b = appendSettings(b, uint64(c.s.MaxHeaderList))
	c.ctrlMu.Lock()
	c.ctrl = ctrl
	_, err = ctrl.Write(b)
	c.ctrlMu.Unlock()
	if err != nil {
		return err
	}
	go c.acceptUni()
	ctx := c.qc.Context()
	for {
		qs, err := c.qc.AcceptStream(ctx)
		if err != nil {
			c.mu.Lock()
			graceful := c.goingAway && c.active == 0
			c.mu.Unlock()
			if graceful {
				return nil
			}
			return err
		}
		c.accept(qs)
	}
}

// accept starts the handler of a request stream, or rejects it when it is
// at or above the GOAWAY's id (RFC 9114 §5.2: the client retries it
// elsewhere, whatever its method).
func (c *Conn) accept(qs *quic.Stream) {
	id := uint64(qs.StreamID())
	early := false
	select {
	case <-c.qc.HandshakeComplete():
	default:
		early = true
	}
	c.mu.Lock()
	if c.goingAway && id >= c.goAwayID {
		c.mu.Unlock()
		qs.CancelRead(quic.StreamErrorCode(ErrRequestRejected))
		qs.CancelWrite(quic.StreamErrorCode(ErrRequestRejected))
		qs.ReleaseStreamCredit()
		return
	}
	c.nextID = max(c.nextID, id+4)
	c.active++
	c.streams++
	c.mu.Unlock()
	st := streamPool.Get().(*Stream)
	*st = Stream{c: c, qs: qs, early: early, clen: -1, w: st.w, header: st.header[:0]}
	if st.r == nil {
		st.r = bufio.NewReaderSize(qs, 4<<10)
	} else {
		st.r.Reset(qs)
	}
	go c.handle(st)
}

// handle reads the request's field section and runs the handler.
func (c *Conn) handle(st *Stream) {
	defer c.done(st)
	st.qs.SetReadDeadline(time.Now().Add(c.s.HeaderTimeout))
	if err := st.readHead(); err != nil {
		var se *StreamError
		var ce *ConnError
		switch {
		case err == errTooLarge:
			// 431, so that the client knows why (RFC 9114 §4.2.2).
			st.WriteHeaders([]qpack.HeaderField{{Name: ":status", Value: "431"}, {Name: "content-length", Value: "0"}}, true)
			st.qs.CancelRead(quic.StreamErrorCode(ErrNoError))
		case errors.As(err, &ce):
			c.fail(ce)
		case errors.As(err, &se):
			c.resetStream(st, se.Code)
		default:
			st.Reset(ErrRequestIncomplete)
		}
		return
	}
	st.qs.SetReadDeadline(time.Time{})
	func() {
		defer func() {
			if v := recover(); v != nil {
				if l := c.s.ErrorLog; l != nil {
					l.Error("internal error serving an HTTP/3 stream; resetting it", "panic", v)
				}
			}
		}()
		c.serve(st)
	}()
}

// readHead reads the request's HEADERS frame (unknown frames before it
// skipped) and checks its fields.
func (st *Stream) readHead() error {
	c := st.c
	for {
		fh, err := readFrameHeader(st.r)
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return &StreamError{Code: ErrRequestIncomplete, Msg: "stream ended before the request's fields"}
			}
			return err
		}
		switch {
		case fh.typ == frameHeaders:
			if fh.len > uint64(c.s.MaxHeaderList) {
				// Encoded, a field section is never larger than decoded
				// by more than a few bytes per field: read past it.
				if _, err := st.r.Discard(int(min(fh.len, 1<<40))); err != nil {
					return &StreamError{Code: ErrRequestIncomplete, Msg: "stream ended inside the fields"}
				}
				return errTooLarge
			}
			block := make([]byte, fh.len)
			if _, err := io.ReadFull(st.r, block); err != nil {
				return &StreamError{Code: ErrRequestIncomplete, Msg: "stream ended inside the fields"}
			}
			st.header, err = decodeFields(st.header[:0], block, c.s.MaxHeaderList)
			if err != nil {
				return err
			}
			st.clen, err = checkRequest(st.header)
			return err
		case fh.typ == frameData:
			return &ConnError{Code: ErrFrameUnexpected, Msg: "DATA before the request's fields"}
		case isControlFrame(fh.typ) || reservedHTTP2(fh.typ):
			return &ConnError{Code: ErrFrameUnexpected, Msg: fmt.Sprintf("frame 0x%x on a request stream", fh.typ)}
		}
		if _, err := st.r.Discard(int(min(fh.len, 1<<40))); err != nil {
			return &StreamError{Code: ErrRequestIncomplete, Msg: "stream ended inside a frame"}
		}
	}
}

// done ends a stream whose handler returned: a response not ended is cut,
// a request body left unread is refused (STOP_SENDING with H3_NO_ERROR,
// RFC 9114 §4.1), and the stream's credit goes back to the client.
func (c *Conn) done(st *Stream) {
	switch {
	case st.reset.Load():
	case !st.done:
		st.Reset(ErrInternal)
	case !st.ended:
		st.qs.CancelRead(quic.StreamErrorCode(ErrNoError))
	}
	clientReset := st.ClientReset()
	st.qs.ReleaseStreamCredit()
	c.mu.Lock()
	c.active--
	if clientReset {
		c.resets++
	}
	// Rapid reset: after twice the stream limit, a client that reset
	// more than half of its streams before their response ended is
	// closed (as Envoy's premature reset guard).
	abuse := c.streams >= 2*c.s.MaxConcurrentStreams && c.resets*2 > c.streams
	last := c.goingAway && c.active == 0
	c.mu.Unlock()
	clear(st.header[:cap(st.header)])
	*st = Stream{w: st.w, r: st.r, header: st.header[:0]}
	st.w.Reset()
	st.r.Reset(nil)
	streamPool.Put(st)
	if abuse {
		c.fail(&ConnError{Code: ErrExcessiveLoad, Msg: "too many streams reset before their response"})
		return
	}
	if last {
		c.finish()
	}
}

// resetStream resets st for a stream error of code.
func (c *Conn) resetStream(st *Stream, code ErrCode) { st.Reset(code) }

// fail closes the connection for a connection error, and returns it.
func (c *Conn) fail(e *ConnError) error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	if l := c.s.ErrorLog; l != nil && l.Enabled(context.Background(), slog.LevelDebug) {
		l.Debug("HTTP/3 connection error", "client", c.qc.RemoteAddr().String(), "error", e.Error())
	}
	c.qc.CloseWithError(quic.ApplicationErrorCode(e.Code), e.Msg)
	return e
}

// Shutdown sends GOAWAY: the request streams accepted so far go on, any
// the client opens from the GOAWAY's id on are rejected with
// H3_REQUEST_REJECTED (never processed: the client may send them again
// anywhere), and once the last request running ends, the connection is
// closed with H3_NO_ERROR. It may be called more than once, from any
// goroutine.
func (c *Conn) Shutdown() {
	c.mu.Lock()
	if c.goingAway {
		c.mu.Unlock()
		return
	}
	c.goingAway = true
	c.goAwayID = c.nextID
	id := c.goAwayID
	last := c.active == 0
	c.mu.Unlock()
	c.ctrlMu.Lock()
	if c.ctrl != nil {
		c.ctrl.Write(appendGoAway(nil, id))
	}
	c.ctrlMu.Unlock()
	if last {
		c.finish()
	}
}

// GoingAway reports whether Shutdown was called.
func (c *Conn) GoingAway() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.goingAway
}

// finish closes a connection that went away with no request left, once
// the client has had time to take the last responses: closing at once
// would throw away what of them is still unacknowledged. A client that
// honours the GOAWAY closes it itself first.
func (c *Conn) finish() {
	linger := min(max(4*c.qc.ConnectionStats().SmoothedRTT, 50*time.Millisecond), time.Second)
	go func() {
		t := time.NewTimer(linger)
		defer t.Stop()
		select {
		case <-c.qc.Context().Done():
		case <-t.C:
			c.qc.CloseWithError(quic.ApplicationErrorCode(ErrNoError), "")
		}
	}()
}

// Close closes the connection at once with H3_NO_ERROR, whatever runs:
// the drain timeout passed.
func (c *Conn) Close() { c.qc.CloseWithError(quic.ApplicationErrorCode(ErrNoError), "") }

// acceptUni accepts the client's unidirectional streams: its control
// stream, whose first frame must be SETTINGS; its QPACK encoder stream,
// which may only set the table's capacity to 0; its QPACK decoder stream,
// read and discarded; push streams, which a client must not open; and
// streams of unknown types, whose reading is refused (RFC 9114 §6.2).
func (c *Conn) acceptUni() {
	ctx := c.qc.Context()
	for {
		rs, err := c.qc.AcceptUniStream(ctx)
		if err != nil {
			return
		}
		go c.readUni(rs)
	}
}

func (c *Conn) readUni(rs *quic.ReceiveStream) {
	r := bufio.NewReaderSize(rs, 256)
	typ, err := quicvarint.Read(r)
	if err != nil {
		return
	}
	if typ <= streamQPACKDecoder {
		c.mu.Lock()
		dup := c.uni[typ]
		c.uni[typ] = true
		c.mu.Unlock()
		if dup {
			c.fail(&ConnError{Code: ErrStreamCreation, Msg: "a second critical stream of one type"})
			return
		}
	}
	switch typ {
	case streamControl:
		err = c.readControl(r)
	case streamQPACKEncoder:
		err = checkEncoderStream(r)
	case streamQPACKDecoder:
		_, err = io.Copy(io.Discard, r)
		if err == nil {
			err = io.EOF
		}
	case streamPush:
		err = &ConnError{Code: ErrStreamCreation, Msg: "a client opened a push stream"}
	default:
		rs.CancelRead(quic.StreamErrorCode(ErrStreamCreation))
		return
	}
	var ce *ConnError
	switch {
	case errors.As(err, &ce):
		c.fail(ce)
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		c.fail(&ConnError{Code: ErrClosedCriticalStream, Msg: "the client closed a critical stream"})
	}
}

// readControl reads the client's control stream: SETTINGS first, then
// GOAWAY (noted), MAX_PUSH_ID and CANCEL_PUSH (ignored: sluice never
// pushes) and unknown frames; any other frame is H3_FRAME_UNEXPECTED.
func (c *Conn) readControl(r *bufio.Reader) error {
	first := true
	for {
		fh, err := readFrameHeader(r)
		if err != nil {
			return err
		}
		if first && fh.typ != frameSettings {
			return &ConnError{Code: ErrMissingSettings, Msg: "the control stream does not begin with SETTINGS"}
		}
		switch {
		case fh.typ == frameSettings:
			if !first {
				return &ConnError{Code: ErrFrameUnexpected, Msg: "a second SETTINGS"}
			}
			first = false
			if fh.len > maxSettingsPayload {
				return &ConnError{Code: ErrExcessiveLoad, Msg: "SETTINGS too large"}
			}
			p := make([]byte, fh.len)
			if _, err := io.ReadFull(r, p); err != nil {
				return io.ErrUnexpectedEOF
			}
			s, err := parseSettings(p)
			if err != nil {
				return err
			}
			c.mu.Lock()
			c.peer, c.peerSeen = s, true
			c.mu.Unlock()
			continue
		case fh.typ == frameGoAway, fh.typ == frameMaxPushID, fh.typ == frameCancelPush:
			if fh.len > 8 {
				return &ConnError{Code: ErrFrame, Msg: "control frame too long"}
			}
			p := make([]byte, fh.len)
			if _, err := io.ReadFull(r, p); err != nil {
				return io.ErrUnexpectedEOF
			}
			if _, err := parseGoAway(p); err != nil {
				return err
			}
			continue
		case fh.typ == frameData, fh.typ == frameHeaders, fh.typ == framePushPromise, reservedHTTP2(fh.typ):
			return &ConnError{Code: ErrFrameUnexpected, Msg: fmt.Sprintf("frame 0x%x on the control stream", fh.typ)}
		}
		if _, err := r.Discard(int(min(fh.len, 1<<40))); err != nil {
			return io.ErrUnexpectedEOF
		}
	}
}

// Counts returns the request streams served so far and how many of them
// the client reset before their response ended.
func (c *Conn) Counts() (streams, resets int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams, c.resets
}
