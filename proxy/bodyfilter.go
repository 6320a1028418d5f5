package proxy

import (
	"io"
	"strconv"

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
	switch f := s.respFrame; {
	case f.Empty():
		return 0
	case f.Kind == h1.Length:
		return f.Length
	}
	return -1
}

// dropFilter aborts an installed filter that will not be used.
func (s *Session) dropFilter() {
	if f := s.transform; f != nil {
		s.transform = nil
		f.Abort()
	}
}

// filterOut collects what a BodyFilter writes, until the relay sends it on
// as one chunk.
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
// hop-by-hop fields stripped; upKeep says whether the upstream connection
// may be pooled once the body is read.
func (s *Session) relayFiltered(peer *Peer, a *Attempt, upKeep bool) {
	up := s.up
	resp := &s.resp
	f := s.transform
	s.transform = nil
	resp.Header.Del("Content-Length")
	resp.Header.Del("Transfer-Encoding")
	chunked := s.Request.Minor >= 1
	down := s.keepAlive && chunked && !s.srv.Draining()
	if chunked {
		resp.Header.Add("Transfer-Encoding", "chunked")
	}
	switch {
	case !down:
		resp.Header.Set("Connection", "close")
	case s.Request.Minor == 0:
		resp.Header.Set("Connection", "keep-alive")
	}
	s.keepAlive = down

	if s.grpc {
		up.Reader.SetReadTimeout(s.srv.streamIdle())
	} else {
		up.Reader.SetReadTimeout(peer.Options.readTimeout())
	}
	up.Reader.Grow(largeBuffer)
	var body h1.Body
	body.Init(&up.Reader, s.respFrame, true, maxResponseHead)

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
	head := true           // the head is still to be sent
	// send sends the head if it is still to go, and what the filter
	// wrote since the last send as one chunk; the last chunk too when
	// last is set. The bytes not sent are pending when the body fails.
	send := func(last bool) error {
		w := s.c.wbuf[:0]
		if head {
			w = h1.AppendResponse(w, resp)
			head = false
		}
		w = s.appendFiltered(w, chunked, last, body.Trailers())
		s.c.wbuf = w[:0]
		if len(w) == 0 {
			return nil
		}
		return s.c.write(w)
	}
	fail := func(err error) {
		f.Abort()
		w := s.c.wbuf[:0]
		if head {
			w = h1.AppendResponse(w, resp)
		}
		w = s.appendFiltered(w, chunked, false, nil)
		s.c.wbuf = w[:0]
		s.failBody(peer, a, w, err)
	}
	if !body.Ready() {
		// Nothing of the body is here yet: the head goes now.
		if err := send(false); err != nil {
			f.Abort()
			s.clientGone(err)
			return
		}
	}
	for {
		seg, err := body.Next()
		if len(seg) > 0 {
			if _, ferr := f.Write(seg); ferr != nil {
				s.filterFailed(f, ferr)
				return
			}
		}
		if body.Done() {
			break
		}
		if err != nil {
			fail(err)
			return
		}
		if !body.Ready() {
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
			s.clientGone(werr)
			return
		}
	}
	if err := f.Close(); err != nil {
		s.filterFailed(f, err)
		return
	}
	// The whole body is read: the upstream connection goes back before
	// the last write, so that the client's next request finds it pooled.
	s.releaseUpstream(a, upKeep)
	if err := send(true); err != nil {
		s.clientGone(err)
	}
}

// appendFiltered appends to w what the filter wrote since the last call,
// as a chunk when chunked, and the last chunk, with trailers (field lines
// with their CRLFs), when last is set.
func (s *Session) appendFiltered(w []byte, chunked, last bool, trailers []byte) []byte {
	out := &s.filtered
	if n := len(out.buf); n > 0 {
		if chunked {
			w = strconv.AppendInt(w, int64(n), 16)
			w = append(w, "\r\n"...)
		}
		w = append(w, out.buf...)
		if chunked {
			w = append(w, "\r\n"...)
		}
		out.buf = out.buf[:0]
	}
	if last && chunked {
		w = append(w, "0\r\n"...)
		w = append(w, trailers...)
		w = append(w, "\r\n"...)
	}
	return w
}

// filterFailed ends a response whose body filter failed: the response has
// started, so the client's connection is cut.
func (s *Session) filterFailed(f BodyFilter, err error) {
	f.Abort()
	s.Err = &fault.Error{Kind: fault.Internal, Source: fault.Internally,
		Context: "filtering the response body", Cause: err}
	s.abort()
}
