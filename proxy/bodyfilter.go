package proxy

import (
	"io"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
)

// BodyFilter rewrites a response body on its way to the client: a
// compressor, say. A ResponseFilter installs one for the response it is
// looking at with Session.FilterBody, having changed the head to say what
// the filter does (Content-Encoding, say).
//
// The engine then re-frames the response: Content-Length and
// Transfer-Encoding from the upstream are dropped and the filtered body
// goes chunked to an HTTP/1.1 client (as DATA frames with no
// content-length to an HTTP/2 one), or until the connection closes to an
// HTTP/1.0 one. The filter gets the body's data as it arrives, with any
// chunked framing and trailers removed; the upstream's trailers follow the
// filtered body to a client that can take them (HTTP/1.1 chunked, HTTP/2),
// as they came.
//
// The engine calls Start once, then Write for each piece of the body and
// Flush whenever it has no more of the body at hand and is about to wait
// for the upstream (so a streamed body, server-sent events say, reaches
// the client as it comes, not when the filter's buffer fills), then Close
// after the last piece. If the body cannot be finished (the upstream or
// the client failed) it calls Abort instead of Close, and the client's
// connection is cut as for any response that cannot be finished. A
// response without a body (HEAD, 204, 304) is relayed as it is and its
// filter is aborted without being started. Exactly one of Close and Abort
// is called for a filter that was installed; after it returns the engine
// no longer uses the filter, which may go back to a pool.
//
// A filter only changes the bytes: the response is relayed after the
// retry decision was taken, as any other, and once its head went to the
// client nothing is retried (what the filter holds back counts as sent).
// An error from the filter ends the response as an internal failure.
type BodyFilter interface {
	// Start begins the body: what the filter writes to w is the body the
	// client gets. w is valid until Close or Abort returns.
	Start(w io.Writer)
	Write(p []byte) (int, error)
	Flush() error
	Close() error
	Abort()
}

// FilterBody has the body of the response a ResponseFilter is looking at
// pass through f on its way to the client (see BodyFilter). It is for
// ResponseFilters only; a filter installed before replaces none but is
// aborted. Calling it anywhere else has the filter aborted unused when the
// request ends.
func (s *Session) FilterBody(f BodyFilter) {
	if s.transform != nil {
		s.transform.Abort()
	}
	s.transform = f
}

// ResponseLength returns the length of the body of the response a
// ResponseFilter is looking at, as its framing says: -1 when it is not
// known ahead (chunked, or until the connection closes), 0 for a response
// without a body (HEAD, 204, 304).
func (s *Session) ResponseLength() int64 {
	if o := s.respOut; o.none {
		return 0
	}
	return s.respOut.length
}

// dropFilter aborts an installed filter that will not be used.
func (s *Session) dropFilter() {
	if f := s.transform; f != nil {
		s.transform = nil
		f.Abort()
	}
}

// filterOut collects what a BodyFilter writes, until the relay hands it
// on.
type filterOut struct {
	buf  []byte
	bufp *[]byte
}

func (o *filterOut) Write(p []byte) (int, error) {
	o.buf = append(o.buf, p...)
	return len(p), nil
}

// maxFiltered is how much filtered output the relay collects before it
// sends it on although more of the body is at hand.
const maxFiltered = 64 << 10

// relayFiltered relays the response whose head is in s.resp with its body
// passed through s.transform (see BodyFilter). The head has had its
// hop-by-hop fields stripped; reusable says whether the try's connection
// may carry another request once the body is read.
func (s *Session) relayFiltered(peer *Peer, a *Attempt, reusable bool) {
	resp := &s.resp
	f := s.transform
	s.transform = nil
	resp.Header.Del("Content-Length")
	resp.Header.Del("Transfer-Encoding")
	body := s.up.response(true, s.readTimeout(peer))
	down := s.down
	down.respond(resp, outBody{length: -1})

	out := &s.filtered
	out.bufp = getBuf()
	out.buf = (*out.bufp)[:0]
	defer func() {
		*out.bufp = out.buf[:0]
		putBuf(out.bufp)
		*out = filterOut{}
	}()
	f.Start(out)
	s.Status = resp.Status // from here on, the response has started
	// send sends the head if it is still to go and what the filter wrote
	// since the last send; the end too, with the upstream's trailers, when
	// last is set. What is not sent is the client's when the body fails.
	send := func(last bool) error {
		down.buffer(out.buf)
		out.buf = out.buf[:0]
		var trailers *h1.Header
		if last {
			trailers = s.responseTrailers(body)
		}
		return down.send(nil, last, trailers)
	}
	fail := func(err error) {
		f.Abort()
		down.buffer(out.buf)
		out.buf = out.buf[:0]
		s.failBody(peer, a, err)
	}
	if !body.ready() {
		// Nothing of the body is here yet: the head goes now.
		if err := send(false); err != nil {
			f.Abort()
			s.lostClient(err, a, body, reusable)
			return
		}
	}
	for {
		seg, err := body.next()
		s.tap(body, seg)
		if len(seg) > 0 {
			if _, ferr := f.Write(seg); ferr != nil {
				s.filterFailed(f, ferr)
				return
			}
		}
		if body.done() {
			break
		}
		if err != nil {
			fail(err)
			return
		}
		if !body.ready() {
			// The next read waits for the upstream: what the filter
			// made of the body so far goes first.
			if ferr := f.Flush(); ferr != nil {
				s.filterFailed(f, ferr)
				return
			}
		} else if len(out.buf) < maxFiltered {
			continue
		}
		if werr := send(false); werr != nil {
			f.Abort()
			s.lostClient(werr, a, body, reusable)
			return
		}
	}
	trailers := s.responseTrailers(body)
	s.teeEnd(trailers) // the upstream's response came whole, whatever the filter makes of it
	if err := f.Close(); err != nil {
		s.filterFailed(f, err)
		return
	}
	// The whole body is read: the try ends before the last send, so that
	// the client's next request finds the connection pooled.
	s.releaseUpstream(a, reusable)
	down.buffer(out.buf)
	out.buf = out.buf[:0]
	if err := down.send(nil, true, trailers); err != nil {
		s.clientGone(err)
	}
}

// filterFailed ends a response whose body filter failed: the response has
// started, so the client's side is cut.
func (s *Session) filterFailed(f BodyFilter, err error) {
	f.Abort()
	s.Err = &fault.Error{Kind: fault.Internal, Source: fault.Internally,
		Context: "filtering the response body", Cause: err}
	s.abort()
}
