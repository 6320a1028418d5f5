package h3

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
)

// Stream is one request stream of a Conn: the request's field section,
// its body (DATA frames) and trailers, and the response written as
// frames. Its methods are for the goroutine the Conn's handler runs on;
// Reset, Done and Early may be called from any goroutine.
type Stream struct {
	c      *Conn
	qs     *quic.Stream
	r      *bufio.Reader
	header []qpack.HeaderField
	early  bool

	// The request body.
	clen     int64  // content-length, -1 without one
	got      int64  // DATA bytes read
	left     uint64 // bytes left of the DATA frame being read
	skip     uint64 // bytes left of an unknown frame being skipped
	ended    bool   // the body ended (FIN after the last frame)
	readErr  error  // the error that ended reading, once it has
	trailers []qpack.HeaderField

	// The response.
	w     bytes.Buffer // the frame being written, header block or DATA
	enc   *qpack.Encoder
	done  bool // the response ended (FIN sent)
	reset atomic.Bool
}

// ID returns the stream's QUIC stream id.
func (st *Stream) ID() uint64 { return uint64(st.qs.StreamID()) }

// Header returns the request's field section, pseudo-fields first, as
// checked (see checkRequest).
func (st *Stream) Header() []qpack.HeaderField { return st.header }

// Early reports whether the request arrived in 0-RTT (TLS early data):
// its stream opened before the connection's handshake was complete, so it
// may be a replay by anyone who captured it (RFC 8470, RFC 9001 §9.2).
func (st *Stream) Early() bool { return st.early }

// ContentLength returns the request's content-length, -1 without one.
func (st *Stream) ContentLength() int64 { return st.clen }

// NoBody reports whether the request is known to have no body: the stream
// ended right after its field section, or its content-length is 0.
func (st *Stream) NoBody() bool {
	if st.clen == 0 || st.ended {
		return true
	}
	if st.left > 0 || st.r.Buffered() > 0 {
		return false
	}
	// The FIN often comes with the field section: look, without waiting.
	st.qs.SetReadDeadline(time.Unix(1, 0))
	_, err := st.r.Peek(1)
	st.qs.SetReadDeadline(time.Time{})
	if err == io.EOF {
		st.ended = true
		return true
	}
	return false
}

// AwaitBody waits until the stream says whether the request has a body (a
// DATA frame or the stream's end), within deadline, and reports whether
// it has none.
func (st *Stream) AwaitBody(deadline time.Time) bool {
	if st.NoBody() {
		return true
	}
	if st.left > 0 || st.r.Buffered() > 0 {
		return false
	}
	st.qs.SetReadDeadline(deadline)
	_, err := st.r.Peek(1)
	st.qs.SetReadDeadline(time.Time{}) // the body's reads set their own
	if err == io.EOF {
		st.ended = true
	}
	return st.ended
}

// Buffered returns how many bytes of the body's current DATA frame have
// arrived and not been read.
func (st *Stream) Buffered() int {
	if st.ended {
		return 0
	}
	return int(min(uint64(st.r.Buffered()), st.left))
}

// Ended reports whether Read has returned the body's end.
func (st *Stream) Ended() bool { return st.ended && st.readErr == io.EOF }

// SetReadDeadline bounds the wait for the body's next bytes.
func (st *Stream) SetReadDeadline(t time.Time) { st.qs.SetReadDeadline(t) }

// Read reads the request body: the payload of its DATA frames. It returns
// io.EOF once the stream ended after the last frame (and the trailers, if
// any: Trailers). A body whose length disagrees with its content-length,
// or a frame out of place, is an error; a frame out of place for the
// connection closes it.
func (st *Stream) Read(p []byte) (int, error) {
	if st.readErr != nil {
		return 0, st.readErr
	}
	for st.left == 0 {
		if err := st.nextFrame(); err != nil {
			if st.readErr == nil && !isTimeout(err) {
				st.readErr = err // the end, or the client's reset
			}
			return 0, err
		}
	}
	if uint64(len(p)) > st.left {
		p = p[:st.left]
	}
	n, err := st.r.Read(p)
	st.left -= uint64(n)
	st.got += int64(n)
	if st.clen >= 0 && st.got > st.clen {
		return 0, st.fail(malformed("body longer than its content-length"))
	}
	switch {
	case err == io.EOF && st.left == 0:
		err = nil // the stream ends after this frame: the next Read says so
	case err == io.EOF:
		err = st.fail(&StreamError{Code: ErrFrame, Msg: "stream ended inside a DATA frame"})
	case err != nil && !isTimeout(err):
		st.readErr = err
	}
	return n, err
}

// nextFrame reads frame headers until a DATA frame's (st.left), the
// trailers, or the stream's end (io.EOF). A wait cut short by the read
// deadline leaves the stream where it was, to go on with the next call:
// a frame header is taken only once it has come whole, an unknown
// frame's payload is skipped as it comes (st.skip).
func (st *Stream) nextFrame() error {
	for st.skip > 0 {
		n, err := st.r.Discard(int(min(st.skip, 1<<30)))
		st.skip -= uint64(n)
		if err == io.EOF {
			return st.fail(&StreamError{Code: ErrFrame, Msg: "stream ended inside a frame"})
		}
		if err != nil {
			return err
		}
	}
	fh, err := peekFrameHeader(st.r)
	switch {
	case err == io.EOF:
		st.ended = true
		if st.clen >= 0 && st.got != st.clen {
			return st.fail(malformed("body shorter than its content-length"))
		}
		return io.EOF
	case err == io.ErrUnexpectedEOF:
		return st.fail(&StreamError{Code: ErrFrame, Msg: "stream ended inside a frame header"})
	case err != nil:
		return err
	}
	switch {
	case fh.typ == frameData:
		if st.trailers != nil {
			return st.fail(&StreamError{Code: ErrFrameUnexpected, Msg: "DATA after trailers"})
		}
		st.left = fh.len
		return nil
	case fh.typ == frameHeaders:
		if st.trailers != nil {
			return st.fail(&StreamError{Code: ErrFrameUnexpected, Msg: "a second trailer section"})
		}
		return st.readTrailers(fh.len)
	case isControlFrame(fh.typ) || reservedHTTP2(fh.typ):
		err := &ConnError{Code: ErrFrameUnexpected, Msg: "control frame on a request stream"}
		st.readErr = err
		return st.c.fail(err)
	}
	// Unknown frame types are ignored (RFC 9114 §9).
	st.skip = fh.len
	return st.nextFrame()
}

func isControlFrame(typ uint64) bool {
	switch typ {
	case frameCancelPush, frameSettings, framePushPromise, frameGoAway, frameMaxPushID:
		return true
	}
	return false
}

// readTrailers reads the trailer section of n bytes.
func (st *Stream) readTrailers(n uint64) error {
	max := st.c.s.MaxHeaderList
	if n > uint64(max) {
		return st.fail(&StreamError{Code: ErrExcessiveLoad, Msg: "trailer section over the limit"})
	}
	block := make([]byte, n)
	if _, err := io.ReadFull(st.r, block); err != nil {
		return st.fail(&StreamError{Code: ErrFrame, Msg: "stream ended inside the trailers"})
	}
	fields, err := decodeFields(make([]qpack.HeaderField, 0, 4), block, max)
	if err == nil {
		err = checkTrailers(fields)
	}
	if err != nil {
		var ce *ConnError
		if errors.As(err, &ce) {
			return st.c.fail(ce)
		}
		return st.fail(err)
	}
	st.trailers = fields
	return nil
}

// fail resets the stream for err, a *StreamError, and returns err.
func (st *Stream) fail(err error) error {
	st.readErr = err
	var se *StreamError
	if errors.As(err, &se) {
		st.c.resetStream(st, se.Code)
	}
	return err
}

// Trailers returns the request's trailer fields, once Read returned io.EOF.
func (st *Stream) Trailers() []qpack.HeaderField { return st.trailers }

// SetWriteDeadline bounds each write of the response.
func (st *Stream) SetWriteDeadline(t time.Time) { st.qs.SetWriteDeadline(t) }

// WriteHeaders writes a field section (an interim or final response head,
// or trailers when end) as a HEADERS frame; with end the stream ends
// after it.
func (st *Stream) WriteHeaders(fields []qpack.HeaderField, end bool) error {
	st.w.Reset()
	st.appendHeaders(fields)
	return st.flush(end)
}

// WriteResponse writes the response's head and body, ending the stream
// after them when end.
func (st *Stream) WriteResponse(fields []qpack.HeaderField, body []byte, end bool) error {
	st.w.Reset()
	st.appendHeaders(fields)
	st.appendData(body)
	return st.flush(end)
}

// Write writes p as a DATA frame.
func (st *Stream) Write(p []byte) (int, error) {
	st.w.Reset()
	st.appendData(p)
	if err := st.flush(false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// End ends the response: the stream's FIN.
func (st *Stream) End() error {
	if st.done {
		return nil
	}
	st.done = true
	return st.qs.Close()
}

// Ended reports whether the response ended.
func (st *Stream) ResponseEnded() bool { return st.done }

// encodeBlock is the QPACK encoder's sink, the stream's write buffer.
func (st *Stream) appendHeaders(fields []qpack.HeaderField) {
	var block bytes.Buffer
	enc := qpack.NewEncoder(&block)
	for _, f := range fields {
		enc.WriteField(f)
	}
	enc.Close()
	var hdr [16]byte
	st.w.Write(appendFrameHeader(hdr[:0], frameHeaders, block.Len()))
	st.w.Write(block.Bytes())
}

func (st *Stream) appendData(p []byte) {
	if len(p) == 0 {
		return
	}
	var hdr [16]byte
	st.w.Write(appendFrameHeader(hdr[:0], frameData, len(p)))
	st.w.Write(p)
}

func (st *Stream) flush(end bool) error {
	if st.reset.Load() {
		return errReset
	}
	if st.w.Len() > 0 {
		if _, err := st.qs.Write(st.w.Bytes()); err != nil {
			return err
		}
	}
	if end {
		return st.End()
	}
	return nil
}

var errReset = errors.New("h3: stream reset")

// Reset ends the stream both ways with code: the client sees the response
// cut, and stops sending the request.
func (st *Stream) Reset(code ErrCode) {
	if st.reset.Swap(true) {
		return
	}
	st.qs.CancelWrite(quic.StreamErrorCode(code))
	st.qs.CancelRead(quic.StreamErrorCode(code))
}

// Done is closed when the stream can send no more: the client stopped
// reading it (STOP_SENDING), sluice reset it, or the response ended.
func (st *Stream) Done() <-chan struct{} { return st.qs.Context().Done() }

// Context is the stream's context, done as Done is.
func (st *Stream) Context() context.Context { return st.qs.Context() }

// ClientReset reports whether the client reset its side of the stream
// (RESET_STREAM or STOP_SENDING).
func (st *Stream) ClientReset() bool {
	var se *quic.StreamError
	if errors.As(st.readErr, &se) && se.Remote {
		return true
	}
	return context.Cause(st.qs.Context()) != nil && errors.As(context.Cause(st.qs.Context()), &se) && se.Remote
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// streamPool holds Streams between requests.
var streamPool = sync.Pool{New: func() any { return new(Stream) }}
