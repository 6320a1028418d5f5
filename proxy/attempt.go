package proxy

import (
	"net"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/clock"
	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/retry"
)

// maxResponseHead bounds an upstream response head.
const maxResponseHead = 64 << 10

// try makes one try of the request on peer. It returns true when the
// request is finished: the response was relayed (or cut after it started,
// or the connection became a tunnel). It returns false with a.Err set when
// the try failed before anything of the final response went to the client;
// then s.up may still hold the connection (and s.held a response whose
// status the policy retries) for the caller to relay or drop.
func (s *Session) try(peer *Peer, pol *retry.Policy, a *Attempt) bool {
	opts := peer.Options
	if !s.connect(peer, pol, a) {
		return false
	}
	up := s.up

	s.buildUpstreamRequest(peer)
	wbuf := h1.AppendRequest(s.c.wbuf[:0], &s.upReq)
	// A retry resends what the client already sent of the body; a small
	// body that arrived with the head goes in the same write.
	syncBody := s.body.prepare(pol)
	wbuf = append(wbuf, s.body.replay...)
	s.c.wbuf = wbuf[:0]
	now := clock.Now()
	var n int
	var err error
	if syncBody {
		// The whole request goes in this write; Send then waits for the
		// answer within the response-header timeout.
		t := opts.responseHeaderTimeout()
		up.ReadDeadlineWithin(now.Add(t), deadlineSlack(t))
		n, err = up.Send(wbuf, opts.writeTimeout())
	} else {
		up.SetWriteDeadline(now.Add(opts.writeTimeout()))
		n, err = up.Write(wbuf)
	}
	s.headWrote = int64(n)
	a.Wrote = s.headWrote
	if err != nil {
		a.Err = fault.FromIO(err, fault.PhaseWrite)
		a.Err.Context = "writing the request to " + peer.Addr
		return false
	}
	if !syncBody {
		// The response may come while the body still flows: no read
		// deadline until the pump sets the response-header timeout at the
		// body's end, and none left from this connection's last request.
		up.SetReadDeadline(time.Time{})
		s.body.start(up, opts)
	}
	if s.srv.expired.Load() {
		// The drain timeout passed while this try was on its way: the
		// wake Shutdown gave its connection may have come before this
		// try set its deadlines.
		s.countWrote(a)
		a.Err = &fault.Error{Kind: fault.Drained, Source: fault.Internally,
			Context: "the drain timeout passed before " + peer.Addr + " answered"}
		return false
	}
	done := s.readResponse(peer, a)
	s.countWrote(a)
	return done
}

// countWrote brings a.Wrote up to date with the body bytes the pump wrote.
// It is exact once the pump has stopped, as it has after a failure.
func (s *Session) countWrote(a *Attempt) {
	a.Wrote = s.headWrote + s.body.written()
}

// connect takes a pooled connection to peer or dials one, into s.up. Which
// pooled connections the try may take is the retry policy's rule
// (retry.Policy.Reuse); which of them are safe for a request that must be
// sent at most once is the pool's (pool.Limits.Once). Over TLS, a new
// connection is handshaken within the connect timeout.
func (s *Session) connect(peer *Peer, pol *retry.Policy, a *Attempt) bool {
	opts := peer.Options
	if p := opts.protocol(); multiplexed(p) {
		return s.connectH2(peer, a, p)
	}
	now := a.Start
	limits := opts.limits()
	key := peer.Addr
	var tlsState *peerTLS
	if t := opts.tlsOptions(); t != nil {
		tlsState = peer.tlsState(t)
		key = tlsState.key
	}
	if limits.MaxIdle > 0 {
		var pc *pool.Conn
		switch pol.Reuse(s.Request.Method(), s.Request.Header.Has(pol.Header()), a.StaleResend) {
		case retry.ReuseAny:
			pc = s.srv.Pool.Get(key, nil)
		case retry.ReuseOnce:
			pc = s.srv.Pool.Get(key, &limits.Once)
		}
		if pc != nil {
			a.Reused = true
			a.IdleAge = now.Sub(pc.IdleSince)
			a.Served = pc.Served
			s.setUp(pc)
			pc.Reader.SetReadTimeout(0)
			return true
		}
	}
	// No TCP keep-alive probes: the pool's idle watcher and timeouts end
	// dead connections, and the probes cost system calls on every dial.
	d := net.Dialer{Timeout: opts.connectTimeout(), KeepAlive: -1}
	nc, err := sock.Dial(s.srv.expire, &d, peer.Addr)
	if err != nil {
		a.Err = fault.FromIO(err, fault.PhaseConnect)
		a.Err.Context = "connecting to " + peer.Addr
		return false
	}
	if tlsState == nil {
		s.setUp(pool.NewConn(nc, key, limits, now))
		return true
	}
	pc := pool.NewTLSConn(nc, tlsState.config, key, limits, now)
	if !s.handshake(pc, peer, tlsState, a) {
		pc.Close()
		return false
	}
	s.setUp(pc)
	return true
}

// setUp makes pc the connection of the try in progress (nil: none), where
// Shutdown can find it.
func (s *Session) setUp(pc *pool.Conn) {
	s.up = pc
	if s.Stream != 0 {
		// The stream's abort may cut the connection at any time, from
		// the HTTP/2 connection's goroutine (streamServe.cut).
		s.c.upMu.Lock()
		s.c.upstream.Store(pc)
		s.c.upMu.Unlock()
		return
	}
	s.c.upstream.Store(pc)
}

// readResponse reads response heads until the final one, relaying interim
// (1xx) responses, and then either relays the response or, when its status
// is one the policy retries, holds it for the caller's decision.
func (s *Session) readResponse(peer *Peer, a *Attempt) bool {
	up := s.up
	readStart := up.Reader.N
	s.readStart = readStart
	method := s.Request.Method()
	for {
		head, err := up.Reader.ReadHead(maxResponseHead, false)
		a.Read = up.Reader.N - readStart
		if err != nil {
			if be := s.body.failure(up); be != nil {
				// The client's side failed while the upstream was
				// waiting for the body: that is the error to answer.
				a.Err = be
				return false
			}
			a.Err = fault.FromIO(err, fault.PhaseReadHead)
			a.Err.Context = "reading the response head from " + peer.Addr
			return false
		}
		if err := h1.ParseResponse(&s.resp, head, s.srv.maxHeaders()); err != nil {
			a.Err = &fault.Error{Kind: fault.InvalidResponse, Source: fault.Upstream,
				Context: "parsing the response head from " + peer.Addr, Cause: err}
			return false
		}
		a.Status = s.resp.Status
		if s.resp.Status >= 200 {
			a.Wait = time.Since(a.Start)
			break
		}
		if s.resp.Status == 101 {
			if !s.upgrade {
				a.Err = &fault.Error{Kind: fault.InvalidResponse, Source: fault.Upstream,
					Context: "101 Switching Protocols to a request that asked for no upgrade from " + peer.Addr}
				return false
			}
			s.tunnel(peer, a)
			return true
		}
		// RFC 9110 §15.2: a proxy forwards 1xx responses, except to an
		// HTTP/1.0 client, which cannot read them.
		if s.Request.Minor >= 1 {
			if s.resp.Status == 100 {
				s.continued = true
			}
			if err := s.writeInterim(); err != nil {
				s.Err = clientErr(err, "writing an interim response to the client")
				s.abort()
				return true
			}
		}
	}
	f, reusable, err := h1.ResponseFraming(method, &s.resp)
	if err != nil {
		a.Err = &fault.Error{Kind: fault.InvalidResponse, Source: fault.Upstream,
			Context: "framing the response from " + peer.Addr, Cause: err}
		return false
	}
	if f.Kind != h1.Length && s.resp.Header.Has("Transfer-Encoding") {
		// RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and
		// an intermediary that forwards such a message removes the
		// Content-Length first, so that nothing after sluice sees both.
		// (ResponseFraming already keeps the connection out of the pool.)
		s.resp.Header.Del("Content-Length")
	}
	s.respFrame, s.respReuse = f, reusable
	if c := retry.Status(s.resp.Status); c != 0 && peer.Options.policy().Conditions()&c != 0 {
		s.held = true
		a.Err = &fault.Error{Kind: fault.UpstreamStatus, Source: fault.Upstream, Status: s.resp.Status,
			Context: "response from " + peer.Addr}
		return false
	}
	s.relay(peer, a)
	return true
}

// dropUpstream ends the current try's use of its connection: stop sending
// the body and close the connection, which can no longer be trusted to be
// at a message boundary.
func (s *Session) dropUpstream() {
	if s.up == nil {
		return
	}
	s.body.stop(s.up)
	s.up.Reader.Release() // the read buffer back to the pool, unless bytes were left unread
	s.up.Close()
	s.setUp(nil)
	s.held = false
}
