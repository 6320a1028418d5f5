package h2

import (
	"errors"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// ClientStream is one request sent upstream and its response. Its methods
// may be called from any goroutine; ReadHeader and Read are for one reader
// at a time, the write methods for one writer at a time, as for a net.Conn.
//
// Every error its methods return can be given to NotProcessed to learn
// whether the request may be sent again on another connection.
//
// A ClientStream is reused for a later request once its owner has called
// Release and the connection is done with it (see Release): neither it nor
// the slices of fields it returned may be used after Release.
type ClientStream struct {
	cc *ClientConn
	stream

	// Guarded by cc.mu, as stream is.
	blocks    [][]hpack.HeaderField // response header blocks not yet returned by ReadHeader
	interim   uint8                 // informational blocks received
	finalRead bool                  // the final block returned by ReadHeader
	released  bool                  // Release was called: recycled once the connection is done with it too

	head bool // a HEAD request: the response has no content

	// inline holds the response's header blocks, one after the other, as
	// long as they fit, and block0 the first block's place in blocks: a
	// response with a short head and short trailers (a gRPC answer) costs
	// no allocation beside the ClientStream's own, which stays within the
	// 768-byte size class (TestStructSizes). inline[:used] are fields of
	// blocks received; the read loop decodes the next block after them,
	// so a block handed out is never written again.
	used   uint8
	inline [maxInlineResponseFields]hpack.HeaderField
	block0 [1][]hpack.HeaderField
}

// maxInlineResponseFields is how many response fields, head and trailers
// together, a ClientStream holds without another allocation.
const maxInlineResponseFields = 12

// clientStreams holds released ClientStreams, for the next requests of any
// connection: a ClientStream was 768 of the 1,057 bytes an HTTP/1.1 request
// proxied to an HTTP/2 upstream allocated, and with a proxy's small live
// heap the collector runs every few MB allocated.
var clientStreams = sync.Pool{New: func() any { return new(ClientStream) }}

// newClientStream returns a ClientStream of cc for a request, zeroed: a
// recycled one or a new one.
func newClientStream(cc *ClientConn, head bool) *ClientStream {
	cs := clientStreams.Get().(*ClientStream)
	cs.cc, cs.head = cc, head
	cs.blocks = cs.block0[:0]
	return cs
}

// Release ends the owner's use of cs: a stream still open (its request or
// its response did not end) is reset with CANCEL, as Reset would, and cs
// is reused for a later request, on this connection or another, once the
// connection is done with it too (at once, unless a header block of its
// response is being decoded into it; then when that block ends).
//
// Release is called once, when no other call on cs is running or may
// start: a body writer (Write, WriteLast, CloseSend, WriteTrailers) has
// returned, and no deadline is set from another goroutine after. Neither
// cs nor what it returned that refers into it may be used after: the
// slices of ReadHeader and Trailers (their fields' strings stay valid,
// never written over), Done's channel stays closed. A caller that keeps
// fields copies them out before. A stream never released is left to the
// collector, as before Release.
func (cs *ClientStream) Release() {
	cc := cs.cc
	cc.mu.Lock()
	sent := cc.resetLocked(&cs.stream, http2.ErrCodeCancel)
	cs.released = true
	cc.recycle(cs)
	cc.mu.Unlock()
	if sent {
		cc.kick()
	}
}

// recycle gives cs back for a later request once both its owner and the
// connection are done with it: released, closed (so out of the streams
// map, where no late frame finds it, since closeStream removes it) and not
// the stream whose header block the reader is decoding into cs.inline.
// Whichever of Release and the end of that block comes last recycles it.
// Zeroing it drops what it referred to (its fields' strings, the
// connection, its buffer, given back first) for the collector. The lock is
// held.
func (cc *ClientConn) recycle(cs *ClientStream) {
	if !cs.released || !cs.closed || cc.decoding == cs {
		return
	}
	cs.retire()
	*cs = ClientStream{}
	clientStreams.Put(cs)
}

// nextFields returns where the next header block's fields are decoded:
// after the fields of blocks received, while there is room. The lock is
// held.
func (cs *ClientStream) nextFields() []hpack.HeaderField {
	return cs.inline[cs.used:cs.used]
}

// took notes that a whole block's fields are in place: when they are
// inline, the next block goes after them. The lock is held.
func (cs *ClientStream) took(fields []hpack.HeaderField) {
	if n := int(cs.used); len(fields) > 0 && n < len(cs.inline) && &fields[0] == &cs.inline[n] {
		cs.used += uint8(len(fields))
	}
}

var errHeadersRead = errors.New("h2: final response header block already read")

// ID returns the stream identifier.
func (cs *ClientStream) ID() uint32 { return cs.id }

// Empty reports, once ReadHeader returned the final header block, whether
// the response ended with it: END_STREAM came with no body and no
// trailers, as in a gRPC "trailers-only" response, whose status is in that
// block.
func (cs *ClientStream) Empty() bool {
	cs.cc.mu.Lock()
	defer cs.cc.mu.Unlock()
	return cs.finalRead && cs.remoteEnded && cs.received == 0 && cs.trailers == nil && cs.err == nil
}

// Done returns a channel closed when the stream has ended either way: both
// sides ended, reset by either side, or the connection gone.
func (cs *ClientStream) Done() <-chan struct{} { return cs.cc.doneOf(&cs.stream) }

// ReadHeader returns the next response header block, waiting for it until
// the read deadline: informational (1xx) blocks first, each returned by its
// own call, then the final one; after that it fails. Blocks are checked as
// they arrive (:status present and valid, 101 excluded; lowercase names; no
// connection-specific field; content-length well-formed): a malformed one
// resets the stream with PROTOCOL_ERROR and ReadHeader returns a
// *ResetError saying why. The slice must not be modified, and is valid
// until Release.
func (cs *ClientStream) ReadHeader() ([]hpack.HeaderField, error) {
	cc := cs.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for {
		if len(cs.blocks) > 0 {
			h := cs.blocks[0]
			cs.blocks[0] = nil
			cs.blocks = cs.blocks[1:]
			if len(cs.blocks) == 0 && cs.gotHead {
				cs.finalRead = true
			}
			return h, nil
		}
		if cs.finalRead {
			return nil, errHeadersRead
		}
		if cs.err != nil {
			return nil, cs.err
		}
		if err := cc.waitRead(&cs.stream); err != nil {
			return nil, err
		}
	}
}

// Read reads the response body (DATA payloads, padding removed), waiting
// until the read deadline. It returns io.EOF after END_STREAM, and the
// stream's error once it failed: a *ResetError, a *GoAwayError, or an error
// matching ErrConnClosed. A response that ended before the stream was reset
// (an early response, §8.1) reads to io.EOF. Credit goes back to the server
// as the body is read, a WINDOW_UPDATE once half a window is read, so a
// reader that stops stalls only its stream. The DATA total is checked
// against the response's content-length (§8.1.1), which resets the stream
// with PROTOCOL_ERROR when they differ.
func (cs *ClientStream) Read(p []byte) (int, error) { return cs.cc.read(&cs.stream, p) }

// Arrived reports how many response body bytes have arrived and not been
// read, and whether the body ended with them (END_STREAM came): Read then
// returns them, and io.EOF after them, without waiting. A relay uses it to
// send what has come together: a small response's head, body and end in
// one write.
func (cs *ClientStream) Arrived() (n int, ended bool) {
	cs.cc.mu.Lock()
	defer cs.cc.mu.Unlock()
	return cs.buffered(), cs.remoteEnded
}

// Trailers returns the response's trailer fields, checked as the header
// block's (and without pseudo-header fields). It is valid once Read has
// returned io.EOF, until Release.
func (cs *ClientStream) Trailers() []hpack.HeaderField { return cs.cc.trailersOf(&cs.stream) }

// SetReadDeadline sets the time after which ReadHeader and Read waiting
// for the server return an error for which errors.Is(err,
// os.ErrDeadlineExceeded) is true. The zero time means none. It applies to
// calls already waiting. The stream is not reset: call Reset to give up.
func (cs *ClientStream) SetReadDeadline(t time.Time) error {
	return cs.cc.setDeadline(&cs.rdl, &cs.rwake, t)
}

// SetWriteDeadline sets the time after which a write waiting for
// flow-control credit returns a deadline error as SetReadDeadline's. A
// frame being written to the connection is bounded by
// ClientSettings.WriteTimeout instead: cutting it would break the
// connection for every stream.
func (cs *ClientStream) SetWriteDeadline(t time.Time) error {
	return cs.cc.setDeadline(&cs.wdl, &cs.wwake, t)
}

// Write sends p as request DATA (without END_STREAM), in frames within the
// server's SETTINGS_MAX_FRAME_SIZE, blocking on the stream's and the
// connection's send windows until the write deadline. It fails once the
// request ended (ErrStreamDone), and with the stream's error once it
// failed; a *ResetError with NO_ERROR after a complete response means the
// server needs no more of the body (§8.1).
func (cs *ClientStream) Write(p []byte) (int, error) { return cs.write(p, false) }

// WriteLast is Write with END_STREAM on the last frame: p is the end of
// the request's body (with p empty, it is CloseSend).
func (cs *ClientStream) WriteLast(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, cs.CloseSend()
	}
	return cs.write(p, true)
}

// write sends p as DATA, END_STREAM on the last frame when last is set.
func (cs *ClientStream) write(p []byte, last bool) (int, error) {
	return cs.cc.write(&cs.stream, p, last, false)
}

// CloseSend ends the request with an empty DATA frame with END_STREAM
// (allowed with any window, §6.9.1), unless it already ended.
func (cs *ClientStream) CloseSend() error { return cs.cc.closeSend(&cs.stream, false) }

// WriteTrailers ends the request with trailer fields (no pseudo-header
// field, lowercase names, no connection-specific field) in a header block
// with END_STREAM. Invalid fields, or more than the server's
// SETTINGS_MAX_HEADER_LIST_SIZE, fail with ErrInvalidRequest before
// anything is sent.
func (cs *ClientStream) WriteTrailers(fields []hpack.HeaderField) error {
	var fc fieldCheck
	size, bad := fc.check(fields, true)
	if bad != "" {
		return errors.Join(ErrInvalidRequest, errors.New("h2: trailer fields: "+bad))
	}
	return cs.cc.writeTrailers(&cs.stream, fields, size)
}

// Reset sends RST_STREAM with code (CANCEL when the client went away),
// once, unless the stream already closed; later calls fail with a
// *ResetError. On a closed stream it only drops what was left unread.
func (cs *ClientStream) Reset(code http2.ErrCode) {
	cc := cs.cc
	sent := cc.reset(&cs.stream, code)
	cc.mu.Lock()
	cs.drop()
	if !sent {
		cs.blocks = nil
	}
	cc.mu.Unlock()
}
