package proxy

import (
	"io"
	"strconv"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/clock"
)

// What request phases may ask of the main line besides an answer of their
// own: to observe the response as it is relayed (Tee), to see the whole
// request body before it goes upstream (ReadBody), and to have the
// request reach the upstream at most once (Once). A cache and an
// Idempotency-Key layer are made of these.

// Tee has t observe the response of this request as it is relayed (see
// ResponseTee); a RequestFilter calls it. Several tees may observe one
// response, each told of it in the order they were installed.
//
// With whole set, the response is read to its end even when the client
// is gone, so that t sees it whole: a client's reset of its HTTP/2 stream
// no longer cuts the try short, and a failed write to the client no longer
// ends the reading of the upstream's body (the client's connection is cut
// all the same). Every other bound stays: the timeouts of each wait, the
// tries, the budget.
func (s *Session) Tee(t ResponseTee, whole bool) {
	s.tees = append(s.tees, t)
	if whole {
		s.flight.whole.Store(true)
	}
}

// Once marks the request as one that must reach the upstream at most
// once, whatever its method and its idempotency key: once a try may have
// reached the upstream, no other try follows (retry.LimitOnce), and a try
// takes only a pooled connection the pool vouches for, as a POST without a
// key does. A RequestFilter calls it, for a request whose answer a layer
// in front of the upstream keeps by its key; no hook lifts it.
func (s *Session) Once() { s.once = true }

// ReadBody reads the whole request body into memory, at most max bytes of
// its data, for a phase that must see it before the request goes upstream
// (to take its digest, say); a RequestFilter calls it. The body is then
// sent upstream from memory, and is held for a resend whatever the retry
// policy's body buffer (an HTTP/1.1 chunked body goes on chunked, framed
// anew, its trailers kept). It returns the body's data, valid until the
// request ends, or the client side's failure: a body over max (413), a
// client gone, too slow, or sending a malformed body. Called again, it
// returns the same body.
func (s *Session) ReadBody(max int64) ([]byte, *fault.Error) { return s.body.readAll(max) }

// tap hands a segment of the response body to the tees: its data only.
func (s *Session) tap(body bodyReader, seg []byte) {
	if len(s.tees) == 0 || len(seg) == 0 || !body.data() {
		return
	}
	for _, t := range s.tees {
		t.Body(seg)
	}
}

// teeHead hands the final response head to the tees.
func (s *Session) teeHead(resp *h1.Response) {
	for _, t := range s.tees {
		t.Head(resp)
	}
}

// teeEnd tells the tees the response was relayed whole.
func (s *Session) teeEnd(trailers *h1.Header) {
	if len(s.tees) == 0 || s.teeEnded {
		return
	}
	s.teeEnded = true
	for _, t := range s.tees {
		t.End(trailers)
	}
}

// teeAbort tells the tees the response was not relayed whole, unless they
// were told how it ended already.
func (s *Session) teeAbort() {
	if len(s.tees) == 0 || s.teeEnded {
		return
	}
	s.teeEnded = true
	for _, t := range s.tees {
		t.Abort()
	}
}

// lostClient ends a relay whose client can take no more. With a tee that
// wants the response whole, the rest of the body is read into the tees
// first (and the try ends as a complete one: its connection is kept).
func (s *Session) lostClient(err error, a *Attempt, body bodyReader, reusable bool) {
	if s.flight.whole.Load() && !s.teeEnded && s.up != nil {
		for !body.done() {
			seg, err := body.next()
			s.tap(body, seg)
			if err != nil && err != io.EOF {
				break
			}
		}
		if body.done() {
			s.teeEnd(s.responseTrailers(body))
			s.releaseUpstream(a, reusable)
		}
	}
	s.clientGone(err)
}

// readAll reads the whole body into replay (see Session.ReadBody).
func (rb *reqBody) readAll(max int64) ([]byte, *fault.Error) {
	if rb.whole {
		return rb.replay, nil
	}
	if rb.err != nil {
		return nil, rb.err
	}
	s := rb.s
	if rb.f.Kind == h1.Length && rb.f.Length > max {
		rb.err = &fault.Error{Kind: fault.BadRequest, Source: fault.Downstream, Status: 413,
			Context: "the request body is over the " + strconv.FormatInt(max, 10) + " bytes a phase reads whole", Cause: h1.ErrBodyTooLarge}
		return nil, rb.err
	}
	// From here the body is held as data, whatever its framing (dataOnly):
	// no resend will need its chunked framing as it came.
	rb.dataOnly = true
	rb.limit = max
	src := rb.src
	timeout := s.srv.bodyTimeout()
	for !rb.finished {
		if !src.ready() {
			// Only a wait needs a deadline: a body at hand with its head
			// (a small POST, mostly) is read without the clock read and
			// the runtime timer a deadline costs.
			src.setReadDeadline(clock.Now().Add(timeout))
		}
		seg, err := src.next()
		if src.data() {
			if int64(len(rb.replay)+len(seg)) > max {
				rb.err = &fault.Error{Kind: fault.BadRequest, Source: fault.Downstream, Status: 413,
					Context: "the request body is over the " + strconv.FormatInt(max, 10) + " bytes a phase reads whole", Cause: h1.ErrBodyTooLarge}
				return nil, rb.err
			}
			rb.keep(seg)
		}
		switch {
		case err == io.EOF || err == nil && src.done():
			src.addTrailers(&rb.trailers)
			rb.finished = true
		case err != nil:
			rb.err = clientErr(err, "reading the request body")
			if err == h1.ErrBodyTooLarge {
				rb.over = true
			}
			return nil, rb.err
		}
	}
	rb.whole = true
	return rb.replay, nil
}
