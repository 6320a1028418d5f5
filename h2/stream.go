package h2

import (
	"errors"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Stream is one request and its response. Its methods may be called from
// any goroutine; Read is for one reader at a time and the write methods for
// one writer at a time, as for a net.Conn.
//
// A Stream holds its request's fields (hdr), and is recycled once its
// Handler has returned and it has closed: a Stream must not be used after
// its Handler returns. Its size is kept within a size class, 896 bytes
// with the allocator's header (TestStructSizes).
type Stream struct {
	c *Conn
	stream
	header []hpack.HeaderField
	// hdr holds the request's fields when they fit: the stream and its
	// header arrive in one allocation.
	hdr [maxInlineFields]hpack.HeaderField

	noBody bool // END_STREAM came with the request's header block
}

// maxInlineFields is how many request fields a Stream holds without
// another allocation: a browser's GET has about a dozen.
const maxInlineFields = 16

// recycled holds Streams whose handlers have returned, for the next
// streams of any connection: a Stream is most of what a request costs
// the collector (896 of about 1,000 bytes an HTTP/2 request to an
// HTTP/1.1 upstream allocated), and with a proxy's small live heap the
// collector ran every few thousand requests, 5–7% of the CPU.
var recycled = sync.Pool{New: func() any { return new(Stream) }}

// newStream returns a Stream for a request's header block: a recycled
// one, zeroed, or a new one.
func newStream() *Stream { return recycled.Get().(*Stream) }

// recycle gives st back for a later stream. Nothing may hold it: its
// handler has returned (or never started) and it is no longer among the
// connection's streams. Zeroing it drops what it referred to (its
// fields' strings, channels, the connection) for the collector.
func (st *Stream) recycle() {
	*st = Stream{}
	recycled.Put(st)
}

// init makes st, allocated when its header block began (its fields were
// decoded into st.hdr when they fit), stream id of c. The lock is held.
func (st *Stream) init(c *Conn, id uint32, header []hpack.HeaderField, length int64) {
	st.c, st.header = c, header
	c.open(&st.stream, id)
	st.length, st.gotHead = length, true
}

// ID returns the stream identifier.
func (st *Stream) ID() uint32 { return st.id }

// Header returns the request's fields as decoded, pseudo-header fields
// first, checked against RFC 9113 §8.2–8.3: lowercase names, no
// connection-specific field, TE only "trailers", :method, :scheme and :path
// exactly once (CONNECT: :method and :authority only), no unknown pseudo
// field, no CR, LF or NUL in values, no empty :path, Host equal to
// :authority when both are present. A malformed request never reaches the
// Handler. The slice must not be modified.
func (st *Stream) Header() []hpack.HeaderField { return st.header }

// NoBody reports whether the request has no body: END_STREAM came with
// its header block, before the Handler started.
func (st *Stream) NoBody() bool { return st.noBody }

// AwaitBody waits until the request tells whether it has a body (DATA
// arrives, or the stream ends: END_STREAM, a reset, the connection gone)
// or deadline passes, and reports whether it is known to have none: it
// ended with no DATA and no trailers. A proxy asks before it frames a body
// of unknown length for an HTTP/1.1 hop, so that a GET whose END_STREAM
// came in a frame of its own goes without a body, not chunked with
// nothing in it. It reads nothing: Read still returns what arrived.
func (st *Stream) AwaitBody(deadline time.Time) bool {
	if st.noBody {
		return true
	}
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for st.buffered() == 0 && !st.remoteEnded && !st.closed {
		if c.await(&st.rwake, deadline, "read", st.id) != nil {
			break // the deadline passed
		}
	}
	return st.buffered() == 0 && st.received == 0 && st.remoteEnded && st.trailers == nil
}

// Arrived reports how many request body bytes have arrived and not been
// read, and whether the body ended with them (END_STREAM came, without
// trailers): a body that arrived whole is read without waiting.
func (st *Stream) Arrived() (n int, whole bool) {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.buffered(), st.remoteEnded && st.trailers == nil
}

// Trailers returns the request's trailer fields, checked as Header's
// (without pseudo-header fields). It is valid once Read has returned io.EOF.
func (st *Stream) Trailers() []hpack.HeaderField { return st.c.trailersOf(&st.stream) }

// Done returns a channel closed when the stream has ended either way: both
// sides ended, reset by either side, or the connection gone. The channel is
// made on the first call: most streams end without anyone asking.
func (st *Stream) Done() <-chan struct{} { return st.c.doneOf(&st.stream) }

// OnAbort arranges for f to be called once if the stream ends abnormally:
// reset by either side, or its connection gone. f runs on the goroutine
// that ended the stream, with the connection's lock held: it must be quick
// and must not call the Stream's or the Conn's methods. If the stream has
// already ended abnormally, f is called at once. OnAbort(nil) cancels: once
// it returns, f is not running and will not run. This lets a handler cut a
// wait of its own (on an upstream, say) when the client gives up, without a
// goroutine watching Done.
func (st *Stream) OnAbort(f func()) {
	c := st.c
	c.mu.Lock()
	if f != nil && st.closed {
		aborted := st.err != nil
		c.mu.Unlock()
		if aborted {
			f()
		}
		return
	}
	st.onAbort = f
	c.mu.Unlock()
}

// Read reads the request body (DATA payloads, padding removed). It returns
// io.EOF after END_STREAM, a *ResetError once the stream was reset, and
// ErrConnClosed once the connection ended. Flow-control credit goes back to
// the client as the body is read (a WINDOW_UPDATE once half a window is
// read), so a handler that stops reading stalls only its stream. When the
// request has a content-length the engine checks the DATA total against it
// (§8.1.1), and resets the stream with PROTOCOL_ERROR when they differ.
func (st *Stream) Read(p []byte) (int, error) { return st.c.read(&st.stream, p) }

// SetReadDeadline sets the time after which a Read waiting for data returns
// an error for which errors.Is(err, os.ErrDeadlineExceeded) and os.IsTimeout
// are true. The zero time means none. It applies to Reads already waiting.
func (st *Stream) SetReadDeadline(t time.Time) error {
	return st.c.setDeadline(&st.rdl, &st.rwake, t)
}

// SetWriteDeadline sets the time after which a write waiting for
// flow-control credit returns a deadline error as SetReadDeadline's. A frame
// being written to the connection is bounded by Settings.WriteTimeout
// instead: cutting it would break the connection for every stream.
func (st *Stream) SetWriteDeadline(t time.Time) error {
	return st.c.setDeadline(&st.wdl, &st.wwake, t)
}

// WriteHeaders sends a response header block: HEADERS, and CONTINUATION as
// needed to keep each frame within the client's SETTINGS_MAX_FRAME_SIZE.
// Fields are given lowercase, :status first; connection-specific fields are
// refused. Informational (1xx) blocks may precede the final one. end sets
// END_STREAM. It fails with ErrStreamDone once the final block was sent.
func (st *Stream) WriteHeaders(fields []hpack.HeaderField, end bool) error {
	return st.WriteResponse(fields, nil, end)
}

// WriteResponse sends the final header block and, when body is not empty,
// DATA with it, in one write to the connection when flow control allows (so
// a small response leaves in one segment); what the windows do not allow at
// once is written as Write would. end sets END_STREAM on the last frame.
// With an informational :status it is WriteHeaders, and body must be empty.
func (st *Stream) WriteResponse(fields []hpack.HeaderField, body []byte, end bool) error {
	status, bad := checkResponse(fields, false)
	if bad != "" {
		return errors.New("h2: response fields: " + bad)
	}
	interim := status[0] == '1'
	if interim && (end || len(body) > 0 || status == "101") {
		return errInterim // §8.1; 101 does not exist in HTTP/2 (§8.6)
	}
	c := st.c
	wb, err := c.lockWrite()
	if err != nil {
		return err
	}
	c.mu.Lock()
	err = st.writeErr()
	if err == nil && st.sentHead {
		err = ErrStreamDone
	}
	c.mu.Unlock()
	if err != nil {
		c.unlockWrite(false)
		return err
	}
	err = c.writeBlock(wb, st.id, fields, end && len(body) == 0)
	c.mu.Lock()
	if err == nil && !interim {
		st.sentHead = true
		if end && len(body) == 0 {
			c.endLocal(&st.stream)
		}
	}
	c.mu.Unlock()
	// As much of the body as the windows allow goes in the same flush.
	for err == nil && len(body) > 0 {
		var n int
		n, err = c.reserve(&st.stream, len(body), false)
		if n == 0 || err != nil {
			break
		}
		last := end && n == len(body)
		err = c.writeData(wb, &st.stream, body[:n], last, n)
		body = body[n:]
	}
	// Unless the response ends here, or waits for credit, it goes on.
	if uerr := c.unlock(false, !end && len(body) == 0); err == nil {
		err = uerr
	}
	if err != nil || len(body) == 0 {
		return err
	}
	if _, err := st.Write(body); err != nil {
		return err
	}
	if end {
		return st.End()
	}
	return nil
}

// Write sends p as DATA (without END_STREAM), in frames within the client's
// SETTINGS_MAX_FRAME_SIZE, blocking on the stream's and the connection's
// send windows until the write deadline. It fails before the final header
// block, after the response ended, after a reset and once the connection
// ended.
func (st *Stream) Write(p []byte) (int, error) { return st.c.write(&st.stream, p, false, true) }

// WriteTrailers sends trailer fields (no pseudo-header field) in a header
// block with END_STREAM.
func (st *Stream) WriteTrailers(fields []hpack.HeaderField) error {
	if _, bad := checkResponse(fields, true); bad != "" {
		return errors.New("h2: trailer fields: " + bad)
	}
	return st.c.writeTrailers(&st.stream, fields, 0)
}

// End ends the response with an empty DATA frame with END_STREAM (allowed
// with any window, §6.9.1), unless it already ended.
func (st *Stream) End() error { return st.c.closeSend(&st.stream, true) }

// Reset sends RST_STREAM with code, once, unless the stream already closed;
// later reads and writes fail with a *ResetError.
func (st *Stream) Reset(code http2.ErrCode) { st.c.reset(&st.stream, code) }
