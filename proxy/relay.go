package proxy

import (
	"errors"
	"io"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/retry"
)

// relay sends the response whose head is in s.resp to the client and
// streams its body, then ends the try, its connection kept for another
// request if the exchange ended cleanly on both sides.
//
// The head and what is at hand of the body go in one send; a body still on
// its way is not waited for, so streamed responses start at once. Small
// segments are gathered into one send with what is buffered behind them;
// a large one goes as it is, uncopied. When the body has ended before a
// send, the try ends first, so that the client's next request finds the
// connection pooled.
func (s *Session) relay(peer *Peer, a *Attempt) {
	up := s.up
	resp := &s.resp
	s.held = false
	if a.Err != nil && a.Err.Kind == fault.UpstreamStatus {
		// Kept for the log; the client gets the upstream's answer.
		a.Err = nil
	}
	out, reusable := up.out()
	s.respOut = out
	stripHopByHop(&resp.Header, false)
	if h := s.hooks.upstreamResponse; h != nil && peer != localPeer {
		if r := h.UpstreamResponseFilter(s, peer, resp); r != nil {
			s.replaceResponse(peer, a, r, out, reusable)
			return
		}
	}
	s.teeHead(resp)
	if rf := s.hooks.responseFilter; rf != nil {
		rf.ResponseFilter(s, peer, resp)
	}
	for i := range s.extra.Len() {
		resp.Header.AddBytes(s.extra.Name(i), s.extra.Value(i))
	}
	if s.reqID != nil && !resp.Header.Has(RequestIDHeader) {
		// The upstream's own (an echo of the id, usually) passes as is.
		resp.Header.AddBytes(requestIDName, s.reqID)
	}
	if s.transform != nil {
		// A ResponseFilter installed a BodyFilter.
		if !out.none && out.length != 0 {
			s.relayFiltered(peer, a, reusable)
			return
		}
		s.dropFilter()
	}

	// A chunked body passes as it came where the client's wire can take
	// it; any other client gets its data.
	pass := out.chunked && s.down.takesChunked()
	out.chunked = pass
	body := up.response(!pass, s.readTimeout(peer))
	down := s.down
	down.respond(resp, out)
	if fb := s.localFile(peer, out); fb != nil {
		s.relayFile(a, fb, reusable)
		return
	}
	var first []byte // a large first segment of a local body, sent uncopied
	if body.ready() {
		seg, err := body.next()
		s.tap(body, seg)
		if peer == localPeer && len(seg) > maxCopied {
			// A Response's body in memory (a stored copy, say) is not the
			// connection's read buffer: it goes as it is, after the head.
			first = seg
		} else {
			down.buffer(seg)
			if err == nil {
				err = s.gather(body)
			}
		}
		if err != nil && err != io.EOF {
			s.failBody(peer, a, err)
			return
		}
	}
	s.Status = resp.Status
	var trailers *h1.Header
	if body.done() {
		// The whole response is at hand: the try ends before the client
		// is written to.
		trailers = s.responseTrailers(body)
		s.teeEnd(trailers)
		s.releaseUpstream(a, reusable)
	}
	if err := down.send(first, body.done(), trailers); err != nil {
		s.lostClient(err, a, body, reusable)
		return
	}
	for !body.done() {
		seg, err := body.next()
		s.tap(body, seg)
		if err != nil && err != io.EOF {
			if len(seg) > 0 {
				down.send(seg, false, nil)
			}
			s.failBody(peer, a, err)
			return
		}
		if len(seg) <= maxCopied && (body.done() || body.ready()) {
			// A small segment is copied, with what is buffered behind it
			// (the next chunk's size line, say), into one send; the copy
			// lets the try end before the send when the body has ended.
			down.buffer(seg)
			seg = nil
			if err := s.gather(body); err != nil && err != io.EOF {
				s.failBody(peer, a, err)
				return
			}
		}
		if body.done() {
			trailers = s.responseTrailers(body)
			s.teeEnd(trailers)
			if len(seg) == 0 {
				s.releaseUpstream(a, reusable)
			}
		}
		if werr := down.send(seg, body.done(), trailers); werr != nil {
			s.lostClient(werr, a, body, reusable)
			return
		}
	}
	if s.up != nil {
		s.releaseUpstream(a, reusable)
	}
}

// replaceResponse answers with r instead of the upstream's response, whose
// head an UpstreamResponseFilter saw: the try ends, its connection kept
// when the response has no body to read, and the tees, which saw nothing
// of it, are told it did not come.
func (s *Session) replaceResponse(peer *Peer, a *Attempt, r *Response, out outBody, reusable bool) {
	if out.none || out.length == 0 {
		// Nothing to read: the end of the response is at hand (an HTTP/2
		// stream's END_STREAM, say), and the connection stays.
		body := s.up.response(true, s.readTimeout(peer))
		for !body.done() {
			if _, err := body.next(); err != nil && err != io.EOF {
				reusable = false
				break
			}
		}
		s.releaseUpstream(a, reusable)
	} else {
		s.dropUpstream()
	}
	s.teeAbort()
	s.tees = s.tees[:0]
	if r.AsUpstream {
		s.serveLocal(r)
		return
	}
	s.answer(r, true)
}

// readTimeout bounds each wait for the response body of peer: for a gRPC
// call, whose stream may be quiet for minutes, the stream idle timeout.
func (s *Session) readTimeout(peer *Peer) time.Duration {
	if s.grpc {
		return s.srv.streamIdle()
	}
	return peer.Options.readTimeout()
}

// responseTrailers returns the trailers of a body that ended, nil for none.
func (s *Session) responseTrailers(body bodyReader) *h1.Header {
	s.trailers.Reset()
	body.addTrailers(&s.trailers)
	if s.trailers.Len() == 0 {
		return nil
	}
	return &s.trailers
}

// localFile returns the file of a Response standing in for an upstream's
// (a disk store's copy, say) when its body can go from the file as it is:
// whole, by its length (no trailers to frame), with no tee to see it.
func (s *Session) localFile(peer *Peer, out outBody) *FileBody {
	if peer != localPeer || len(s.tees) > 0 || out.none || out.length <= 0 {
		return nil
	}
	return s.local.r.File
}

// relayFile sends a local response's file body by the downstream's
// sendFile (sendfile(2) to a plain TCP client: the bytes are not copied
// through sluice), its first piece (up to smallFile) buffered with the head,
// then ends the try, which closes the file.
func (s *Session) relayFile(a *Attempt, fb *FileBody, reusable bool) {
	down := s.down
	s.Status = s.resp.Status
	n := min(fb.Size, smallFile)
	bp := getBuf()
	b, ok := appendFile((*bp)[:0], &FileBody{File: fb.File, Offset: fb.Offset, Size: n})
	down.buffer(b)
	*bp = b[:0]
	putBuf(bp)
	if !ok {
		s.failBody(localPeer, a, &fileError{nil})
		return
	}
	var err error
	if rest := (&FileBody{File: fb.File, Offset: fb.Offset + n, Size: fb.Size - n}); rest.Size > 0 {
		err = down.sendFile(rest) // the head and the first piece with it
	}
	if err == nil {
		err = down.send(nil, true, nil)
	}
	var fe *fileError
	switch {
	case errors.As(err, &fe):
		s.failBody(localPeer, a, err)
	case err != nil:
		s.clientGone(err)
	default:
		s.local.rbody.n = fb.Size
		s.releaseUpstream(a, reusable)
	}
}

// maxCopied bounds the body bytes copied into one send (rather than sent
// from the upstream's buffer): a small last segment, so that the try ends
// before the send, and the pieces gather collects.
const maxCopied = 16 << 10

// gather hands the downstream the body segments already at hand (next
// reads nothing for them), while what it holds stays within maxCopied: a
// chunked body's size lines, data and CRLFs, which next returns one by
// one, then leave in one send, and a body still on its way is not waited
// for.
func (s *Session) gather(body bodyReader) error {
	down := s.down
	for !body.done() && body.ready() && down.held()+body.buffered() <= maxCopied {
		seg, err := body.next()
		s.tap(body, seg)
		down.buffer(seg)
		if err != nil {
			return err
		}
	}
	return nil
}

// releaseUpstream ends the try after a complete response: the request body
// pump is stopped and the connection kept for another request when both
// sides of the exchange ended cleanly.
func (s *Session) releaseUpstream(a *Attempt, reusable bool) {
	up := s.up
	a.Read = up.read()
	s.body.stop(up)
	s.countWrote(a)
	if !s.body.complete() {
		// The upstream answered before the request body ended: the
		// upstream connection is not at a message boundary, and the
		// client's is only once the rest of the body is read and thrown
		// away.
		reusable = false
		if !s.body.drain() {
			s.keepAlive = false
		}
	}
	s.setUp(nil)
	up.finish(reusable)
}

// failBody handles an upstream failure after the response head was read:
// whatever was sent, the client's side is cut rather than finished with a
// response that looks complete (invariant 4).
func (s *Session) failBody(peer *Peer, a *Attempt, err error) {
	e := fault.FromIO(err, fault.PhaseReadBody)
	if be := s.body.failure(s.up); be != nil {
		e = be
	}
	e.Context = "reading the response body from " + peer.Addr
	e = retry.Blame(e, s.down.gone(), false, peer.Addr)
	s.countWrote(a)
	a.Err = e
	s.Err = e
	if s.down.send(nil, false, nil) == nil {
		s.Status = s.resp.Status // the head and what arrived went: then the cut
	}
	e.Retry, e.Why = false, retry.ResponseStarted
	s.teeAbort()
	s.abort()
	s.logTry(a, true)
}

// clientGone handles a failed write to the client during the response.
func (s *Session) clientGone(err error) {
	s.Err = clientErr(err, "writing the response to the client")
	s.abort()
}

// abort ends an exchange whose response had started and cannot be
// finished: the try is dropped, and the client sees the response cut
// (downstream.abort), never a response that looks whole.
func (s *Session) abort() {
	s.Aborted = true
	s.keepAlive = false
	s.down.abort()
	s.dropUpstream()
}

// tunnel relays a 101 Switching Protocols and then the bytes of the new
// protocol both ways until both sides have finished. The upstream
// connection is never reused.
func (s *Session) tunnel(peer *Peer, a *Attempt) {
	up := s.up
	s.body.stop(up)
	nc, buffered := up.hijack()
	if nc == nil {
		a.Err = &fault.Error{Kind: fault.InvalidResponse, Source: fault.Upstream,
			Context: "101 Switching Protocols from " + peer.Addr + " over a wire that cannot switch"}
		s.answerError(a.Err)
		return
	}
	s.Status = 101
	if err := s.down.tunnel(&s.resp, nc, buffered); err != nil {
		s.clientGone(err)
		return
	}
	s.setUp(nil)
}
