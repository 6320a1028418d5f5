package proxy

import (
	"bytes"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/retry"
)

// relay sends the response whose head is in s.resp to the client and
// streams its body, then returns the upstream connection to the pool if
// the exchange ended cleanly on both sides.
func (s *Session) relay(peer *Peer, a *Attempt) {
	up := s.up
	resp := &s.resp
	s.held = false
	if a.Err != nil && a.Err.Kind == fault.UpstreamStatus {
		// Kept for the log; the client gets the upstream's answer.
		a.Err = nil
	}
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
	upKeep := s.respReuse && h1.KeepAlive(resp.Minor, &resp.Header)
	learnKeepAlive(s, up.Served+1, &resp.Header)
	closing := resp.Header.HasToken("Connection", "close")
	if closing {
		// The upstream is closing this connection, often because the
		// process behind it is going away (gunicorn's max_requests);
		// its other pooled connections may follow.
		s.srv.Pool.MarkClosing(up.Key)
	}
	stripHopByHop(&resp.Header, false)
	if s.transform != nil {
		// A ResponseFilter installed a BodyFilter.
		if !s.respFrame.Empty() {
			s.relayFiltered(peer, a, upKeep)
			return
		}
		s.dropFilter()
	}

	frame := s.respFrame
	decode := frame.Kind == h1.Chunked && s.Request.Minor == 0
	if decode {
		// An HTTP/1.0 client cannot read chunked: decode, and let the
		// close of the connection end the body.
		resp.Header.Del("Transfer-Encoding")
	}
	down := s.keepAlive && frame.Kind != h1.UntilClose && !decode && !s.srv.Draining()
	switch {
	case !down:
		resp.Header.Set("Connection", "close")
	case s.Request.Minor == 0:
		resp.Header.Set("Connection", "keep-alive")
	}
	s.keepAlive = down

	var body h1.Body
	if s.grpc {
		up.Reader.SetReadTimeout(s.srv.streamIdle())
	} else {
		up.Reader.SetReadTimeout(peer.Options.readTimeout())
	}
	full := up.Reader.Full()
	switch {
	case frame.Kind == h1.UntilClose || frame.Kind == h1.Chunked:
		up.Reader.Grow(largeBuffer)
	case frame.Kind == h1.Length && frame.Length > smallBody:
		// A larger body moves in reads and writes of up to 64 KiB, not
		// 4 KiB: a body of up to 64 KiB in one of each.
		up.Reader.Grow(int(min(largeBuffer, frame.Length+int64(up.Reader.Buffered()))))
	}
	body.Init(&up.Reader, frame, decode, maxResponseHead)
	var early error // how that read found the connection, if broken
	if rest := frame.Length - int64(up.Reader.Buffered()); full && frame.Kind == h1.Length && rest > 0 && rest <= maxCopied {
		// The read of the head filled the buffer, so the rest of a body
		// that came whole is likely in the socket already: take what is
		// there, without waiting, and head and body leave in one write
		// instead of two. (An end of stream is left for the next read,
		// which sees it again; a reset is not, and is kept.)
		_, err := up.Reader.FillWith(up.Now(), int(frame.Length))
		if err != nil && err != pool.ErrNothingYet && err != io.EOF {
			early = err
		}
	}

	// The head and whatever of the body is already buffered go out in one
	// write; a body still on its way is not waited for, so streamed
	// responses start at once.
	wbuf := h1.AppendResponse(s.c.wbuf[:0], resp)
	headLen := len(wbuf)
	if up.Reader.Buffered() > 0 || body.Done() {
		seg, err := body.Next()
		wbuf = append(wbuf, seg...)
		if err == nil {
			wbuf, err = gather(wbuf, &body, &up.Reader)
		}
		if err != nil && err != io.EOF {
			s.c.wbuf = wbuf[:0]
			s.failBody(peer, a, wbuf, err)
			return
		}
	}
	s.c.wbuf = wbuf[:0]
	if early != nil && !body.Done() {
		s.failBody(peer, a, wbuf, early)
		return
	}
	s.Status = resp.Status
	if body.Done() {
		// The whole response is in wbuf: the upstream connection goes
		// back before the client is written to, so that the client's
		// next request finds it pooled.
		s.releaseUpstream(a, upKeep)
	}
	s.c.giveHead(resp, headLen)
	err := s.c.write(wbuf)
	s.c.giveHead(nil, 0)
	if err != nil {
		s.clientGone(err)
		return
	}
	for !body.Done() {
		seg, err := body.Next()
		if err != nil && err != io.EOF {
			if len(seg) > 0 {
				s.c.write(seg)
			}
			s.failBody(peer, a, nil, err)
			return
		}
		if len(seg) <= maxCopied && (body.Done() || body.Ready()) {
			// A small segment is copied, with what is buffered behind it
			// (the next chunk's size line, say), into one write; the
			// copy lets the upstream connection go back before the
			// write when the body has ended.
			out, err := gather(append(s.c.wbuf[:0], seg...), &body, &up.Reader)
			s.c.wbuf = out[:0]
			if err != nil && err != io.EOF {
				s.failBody(peer, a, out, err)
				return
			}
			seg = out
			if body.Done() {
				s.releaseUpstream(a, upKeep)
			}
		}
		if len(seg) > 0 {
			if werr := s.c.write(seg); werr != nil {
				s.clientGone(werr)
				return
			}
		}
	}
	if s.up != nil {
		s.releaseUpstream(a, upKeep)
	}
}

// A response body over smallBody bytes (or of unknown length) is read with
// a buffer of up to largeBuffer bytes.
const (
	smallBody   = 2 << 10
	largeBuffer = 64 << 10
)

// maxCopied bounds the body bytes copied into one write (rather than
// written from the upstream connection's buffer): a small last segment, so
// that the connection goes back before the client write, and the pieces
// gather collects.
const maxCopied = 16 << 10

// gather appends to out the body segments already buffered in r (Next
// reads nothing for them), while out stays within maxCopied: a chunked
// body's size lines, data and CRLFs, which Next returns one by one, then
// leave in one write, and a body still on its way is not waited for.
func gather(out []byte, body *h1.Body, r *h1.Reader) ([]byte, error) {
	for !body.Done() && body.Ready() && len(out)+r.Buffered() <= maxCopied {
		seg, err := body.Next()
		out = append(out, seg...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// releaseUpstream ends the try after a complete response: the request body
// pump is stopped and the connection goes back to the pool when both sides
// of the exchange ended cleanly.
func (s *Session) releaseUpstream(a *Attempt, upKeep bool) {
	up := s.up
	a.Read = up.Reader.N - s.readStart
	s.body.stop(up)
	s.countWrote(a)
	if !s.body.complete() {
		// The upstream answered before the request body ended: the
		// upstream connection is not at a message boundary, and the
		// client's is only once the rest of the body is read and thrown
		// away.
		upKeep = false
		if !s.body.drain() {
			s.keepAlive = false
		}
	}
	s.setUp(nil)
	up.Served++
	if upKeep {
		s.srv.Pool.Put(up)
	} else {
		up.Reader.Release()
		up.Close()
	}
}

// failBody handles an upstream failure after the response head was read:
// whatever was sent, the client connection is cut rather than finished
// with a response that looks complete (invariant 4).
func (s *Session) failBody(peer *Peer, a *Attempt, pending []byte, err error) {
	e := fault.FromIO(err, fault.PhaseReadBody)
	if be := s.body.failure(s.up); be != nil {
		e = be
	}
	e.Context = "reading the response body from " + peer.Addr
	if s.c.gone() {
		e = &fault.Error{Kind: fault.ClientClosed, Source: fault.Downstream,
			Context: "the client reset the stream while " + peer.Addr + " was answering", Cause: e}
	}
	s.countWrote(a)
	a.Err = e
	s.Err = e
	if len(pending) > 0 {
		s.c.write(pending) // the head and what arrived: then the cut
		s.Status = s.resp.Status
	}
	e.Retry, e.Why = false, retry.ResponseStarted
	s.abort()
	s.logTry(a, true)
}

// clientGone handles a failed write to the client during the response.
func (s *Session) clientGone(err error) {
	s.Err = clientErr(err, "writing the response to the client")
	s.abort()
}

// abort ends an exchange whose response had started and cannot be
// finished: the upstream connection is dropped, and the client's is reset
// once the request is logged, never closed with a FIN, which a client
// reading a close-delimited body (HTTP/1.0, or no Content-Length) would
// take for the end of a complete response. Whatever the framing, the
// client sees a reset.
func (s *Session) abort() {
	s.Aborted = true
	s.keepAlive = false
	s.c.reset = true
	s.dropUpstream()
}

// writeInterim relays a 1xx response head (100 Continue, 103 Early Hints).
func (s *Session) writeInterim() error {
	stripHopByHop(&s.resp.Header, false)
	wbuf := h1.AppendResponse(s.c.wbuf[:0], &s.resp)
	s.c.wbuf = wbuf[:0]
	return s.c.write(wbuf)
}

// tunnel relays a 101 Switching Protocols and then copies bytes both ways
// until both sides have finished. The upstream connection is never reused.
func (s *Session) tunnel(peer *Peer, a *Attempt) {
	up := s.up
	s.body.stop(up)
	stripHopByHop(&s.resp.Header, true)
	s.resp.Header.Set("Connection", "Upgrade")
	wbuf := h1.AppendResponse(s.c.wbuf[:0], &s.resp)
	s.c.wbuf = wbuf[:0]
	s.Status = 101
	if err := s.c.write(wbuf); err != nil {
		s.clientGone(err)
		return
	}
	s.Upgraded = true
	s.keepAlive = false
	client := s.c.nc
	client.SetDeadline(time.Time{})
	s.c.writeBy = time.Time{}
	up.SetDeadline(time.Time{})

	// Bytes that arrived behind the heads belong to the new protocol.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if b := up.Reader.Peek(); len(b) > 0 {
			n, _ := client.Write(b)
			s.BytesOut += int64(n)
			up.Reader.Discard(len(b))
		}
		n, _ := io.Copy(client, up.Conn)
		s.BytesOut += n
		closeWrite(client)
	}()
	if b := s.c.r.Peek(); len(b) > 0 {
		up.Write(b)
		s.BytesIn += int64(len(b))
		s.c.r.Discard(len(b))
	}
	n, _ := io.Copy(up.Conn, client)
	s.BytesIn += n
	closeWrite(up.Conn)
	// The client is done (or gone, or cut by Shutdown): the upstream gets
	// a moment to finish its side, not forever.
	up.SetReadDeadline(time.Now().Add(tunnelGrace))
	wg.Wait()
	up.Close()
	s.setUp(nil)
}

// tunnelGrace bounds how long a tunnel's upstream side may go on after the
// client's side ended.
const tunnelGrace = 10 * time.Second

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// learnKeepAlive hands the limits an upstream announces for its
// connection (Keep-Alive: timeout=N, max=M) to the pool, so that it retires
// the connection before the upstream would close it. served is the request
// count including the current one.
func learnKeepAlive(s *Session, served int, h *h1.Header) {
	v := h.Get("Keep-Alive")
	if v == nil {
		return
	}
	idle, remaining := parseKeepAlive(v)
	if idle >= 0 {
		s.up.IdleLimit = max(idle, time.Millisecond)
	}
	if remaining >= 0 {
		// max counts the requests the upstream will still take on this
		// connection after this one (Apache's convention).
		s.up.MaxServed = served + remaining
	}
}

// parseKeepAlive reads a Keep-Alive field value ("timeout=5, max=100").
// It returns how long the connection may stay idle, a safety margin before
// the announced timeout (one second, or half the timeout when that is two
// seconds or less, so a request never leaves on a connection the upstream
// is closing at that moment), and how many more requests it takes; -1 for
// what is not announced or not a plain number.
func parseKeepAlive(v []byte) (idle time.Duration, remaining int) {
	idle, remaining = -1, -1
	for len(v) > 0 {
		var item []byte
		item, v = h1.CutList(v)
		name, val, ok := bytes.Cut(item, []byte{'='})
		if !ok {
			continue
		}
		n, ok := h1.ParseDecimal(bytes.Trim(bytes.TrimSpace(val), `"`))
		if !ok || n > maxKeepAliveNumber {
			continue
		}
		switch {
		case h1.EqualFold(bytes.TrimSpace(name), "timeout"):
			t := time.Duration(n) * time.Second
			margin := time.Second
			if t <= 2*time.Second {
				margin = t / 2
			}
			idle = t - margin
		case h1.EqualFold(bytes.TrimSpace(name), "max"):
			remaining = int(n)
		}
	}
	return idle, remaining
}

// maxKeepAliveNumber bounds the numbers taken from Keep-Alive: a timeout
// of more seconds would overflow a time.Duration, and such limits mean
// none.
const maxKeepAliveNumber = 999_999_999
