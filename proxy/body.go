package proxy

import (
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/retry"
)

// reqBody moves the request body from the client to the upstream while the
// response comes back (full duplex: an upstream may answer before the body
// has ended), keeping what it sent for a resend as long as it fits the
// policy's body buffer.
//
// A body that arrived whole with its head is sent in the same write as the
// head. Any other body is sent by a goroutine per try (the pump), which the
// session stops before the next try or once the response is relayed. A
// stopped pump leaves the body reader where it was, so the next try's pump
// resumes after resending the kept bytes.
type reqBody struct {
	s       *Session
	src     requestBody
	f       h1.Framing
	limit   int64   // bytes that may be kept for a resend
	replay  []byte  // every byte consumed so far, while not truncated
	replayp *[]byte // replay's pooled storage, borrowed on first use
	// consumed counts body bytes taken from the client; truncated is set
	// once replay no longer holds them all; finished once the body ended.
	consumed  int64
	truncated bool
	finished  bool
	prepared  bool
	trailers  h1.Header // the body's, once it ended
	// whole is set once a phase read the body whole (readAll); dataOnly
	// from then on: replay holds its data, not its framing as it came.
	whole, dataOnly bool

	running bool
	sent    atomic.Int64  // body bytes the pump wrote on this try's connection
	done    chan struct{} // one signal per pump run
	mu      sync.Mutex    // orders stop against the pump's deadline setting
	stopped bool
	err     *fault.Error // the client side's failure, from the pump

	// limited is set by Session.LimitBody, which bounds the body's
	// content to max bytes; over is set once the body was found over it
	// (by the pump: read after it stopped). sealed is set once the
	// RequestFilter returned: a limit set later is ignored.
	limited bool
	max     int64
	over    bool
	sealed  bool
}

func (rb *reqBody) init(s *Session, f h1.Framing) {
	rb.s = s
	rb.f = f
	rb.replay = rb.replay[:0]
	rb.trailers.Reset()
	rb.src = s.down.body(f)
	rb.finished = f.Empty()
}

// framed reports whether the body comes, and is kept for a resend, in
// HTTP/1.1 chunked framing (requestBody.framed).
func (rb *reqBody) framed() bool { return rb.src != nil && rb.src.framed() && !rb.dataOnly }

// trailerFields returns the body's trailers once it ended; nil for none.
func (rb *reqBody) trailerFields() *h1.Header {
	if !rb.finished || rb.trailers.Len() == 0 {
		return nil
	}
	return &rb.trailers
}

// limitTo bounds the body's content to n bytes (see Session.LimitBody).
func (rb *reqBody) limitTo(n int64) {
	if n < 0 || rb.sealed || rb.limited && n >= rb.max {
		return
	}
	rb.limited, rb.max = true, n
	rb.src.limit(n)
}

// lengthOver returns the failure of a request whose Content-Length is over
// the body limit, found before any of the body is read or anything is sent
// upstream; nil for any other request.
func (rb *reqBody) lengthOver() *fault.Error {
	rb.sealed = true
	if !rb.limited || rb.f.Kind != h1.Length || rb.f.Length <= rb.max {
		return nil
	}
	rb.over = true
	rb.err = &fault.Error{Kind: fault.BadRequest, Source: fault.Downstream, Status: 413,
		Context: "the request body's Content-Length, " + strconv.FormatInt(rb.f.Length, 10) +
			", is over the limit of " + strconv.FormatInt(rb.max, 10) + " bytes; nothing was sent upstream",
		Cause: h1.ErrBodyTooLarge}
	return rb.err
}

// prereadMax is the largest body (by Content-Length) that sluice tries to
// have whole before the first try: the head and body then leave in one
// write and no pump runs.
const prereadMax = 64 << 10

// preread takes in what has already arrived of a small Content-Length
// body, without waiting for more: a body still on its way goes through the
// pump, so that an upstream may answer before it ends (full duplex).
func (rb *reqBody) preread() {
	if rb.finished || rb.f.Kind != h1.Length || rb.f.Length > prereadMax {
		return
	}
	rb.limit = prereadMax
	src := rb.src
	src.prefetch(rb.f.Length)
	if int64(src.buffered()) < rb.f.Length {
		return
	}
	for !src.done() {
		seg, err := src.next()
		rb.keep(seg)
		if err != nil {
			break
		}
	}
	rb.finished = src.done()
}

// prepare readies the body for a try under pol and reports whether all of
// it is in replay, to go out in the same write as the head (no pump
// needed).
func (rb *reqBody) prepare(pol *retry.Policy) bool {
	rb.sent.Store(0)
	if !rb.prepared {
		rb.prepared = true
		if !rb.finished && rb.consumed == 0 {
			rb.limit = pol.BufferSize()
			if pol.MaxTries() == 1 {
				rb.limit = 0
			}
		}
	}
	return rb.finished
}

// keep records consumed bytes in replay while they fit.
func (rb *reqBody) keep(seg []byte) {
	rb.consumed += int64(len(seg))
	rb.s.BytesIn = rb.consumed
	if rb.truncated {
		return
	}
	if int64(len(rb.replay)+len(seg)) > rb.limit {
		rb.truncated = true
		rb.replay = rb.replay[:0]
		return
	}
	if rb.replayp == nil {
		rb.replayp = getBuf()
		rb.replay = (*rb.replayp)[:0]
	}
	rb.replay = append(rb.replay, seg...)
}

// start runs the pump for a try on up.
func (rb *reqBody) start(up upstream, opts *PeerOptions) {
	if rb.finished {
		return
	}
	rb.running = true
	rb.stopped = false
	rb.err = nil
	go rb.pump(up, opts.writeTimeout(), opts.responseHeaderTimeout())
}

func (rb *reqBody) pump(up upstream, writeTimeout, headerTimeout time.Duration) {
	defer func() { rb.done <- struct{}{} }()
	src := rb.src
	bodyTimeout := rb.s.srv.bodyTimeout()
	if rb.s.grpc {
		bodyTimeout = rb.s.srv.streamIdle() // a client stream's messages come when they come
	}
	for {
		rb.mu.Lock()
		if rb.stopped {
			rb.mu.Unlock()
			return
		}
		src.setReadDeadline(time.Now().Add(bodyTimeout))
		rb.mu.Unlock()

		seg, err := src.next()
		data := src.data()
		if err == nil && src.done() {
			err = io.EOF // the last segment: it goes with the body's end
		}
		if err == io.EOF {
			rb.keep(seg)
			src.addTrailers(&rb.trailers)
			rb.finished = true
			up.setWriteDeadline(time.Now().Add(writeTimeout))
			n, werr := up.end(seg, data, rb.trailerFields())
			rb.sent.Add(int64(n))
			if werr == nil {
				// The response-header timeout runs from the end of the
				// request.
				up.setReadDeadline(time.Now().Add(headerTimeout))
			}
			return
		}
		if len(seg) > 0 {
			rb.keep(seg)
			up.setWriteDeadline(time.Now().Add(writeTimeout))
			n, werr := up.body(seg, data)
			rb.sent.Add(int64(n))
			if werr != nil {
				// The upstream stopped reading; what it said, if
				// anything, is for the response side to find.
				return
			}
		}
		if err != nil {
			rb.mu.Lock()
			stopped := rb.stopped
			rb.mu.Unlock()
			if stopped {
				return
			}
			// The client failed mid-body (gone, too slow, or bad chunked
			// framing), or its body grew past the limit: the upstream
			// exchange is aborted, never completed, and cutting its
			// waits wakes the response side.
			rb.err = clientErr(err, "reading the request body")
			if err == h1.ErrBodyTooLarge {
				rb.over = true
				rb.err.Context = "reading the request body: it grew past the limit of " +
					strconv.FormatInt(rb.max, 10) + " bytes, and the try was aborted"
			}
			up.cut(time.Now())
			return
		}
	}
}

// stop ends the pump, if running, and waits for it.
func (rb *reqBody) stop(up upstream) {
	if !rb.running {
		return
	}
	rb.mu.Lock()
	rb.stopped = true
	rb.src.setReadDeadline(time.Now())
	rb.mu.Unlock()
	up.setWriteDeadline(time.Now())
	<-rb.done
	rb.running = false
}

// maxDrain bounds how much of a request body sluice reads and throws away
// after the upstream answered before the body ended, to keep the client's
// connection usable (nginx discards such bodies too).
const maxDrain = 1 << 20

// drain reads the rest of the request body from the client and discards
// it, within the body timeout per read and maxDrain in all. It reports
// whether the body then ended, leaving the connection at the start of the
// next request. The pump must be stopped.
func (rb *reqBody) drain() bool {
	if rb.finished {
		return true
	}
	if rb.err != nil {
		return false
	}
	s := rb.s
	if rb.consumed == 0 && s.Request.Header.Has("Expect") && !s.continued {
		// A client that asked for 100 Continue and got a final answer
		// instead may never send its body.
		return false
	}
	if rb.f.Kind == h1.Length && rb.f.Length-rb.consumed > maxDrain {
		return false
	}
	if !rb.src.mustDrain() {
		return true // the rest is refused with the exchange (an HTTP/2 stream's)
	}
	timeout := s.srv.bodyTimeout()
	var drained int64
	for !rb.src.done() {
		rb.src.setReadDeadline(time.Now().Add(timeout))
		seg, err := rb.src.next()
		drained += int64(len(seg))
		rb.consumed += int64(len(seg))
		if err != nil && err != io.EOF || drained > maxDrain {
			rb.over = rb.over || err == h1.ErrBodyTooLarge
			return false
		}
	}
	rb.finished = true
	s.BytesIn = rb.consumed
	return true
}

// failure stops the pump and returns the client side's failure, if any.
func (rb *reqBody) failure(up upstream) *fault.Error {
	rb.stop(up)
	return rb.err
}

// written returns the body bytes the pump wrote on this try's connection,
// final once the pump has stopped.
func (rb *reqBody) written() int64 { return rb.sent.Load() }

// replayable reports whether every body byte consumed so far is kept.
func (rb *reqBody) replayable() bool { return !rb.truncated }

// complete reports whether the whole body was read from the client, so that
// the connection is at the start of the next request.
func (rb *reqBody) complete() bool { return rb.finished }
