package proxy

import (
	"net"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/retry"
)

// try makes one try of the request on peer. It returns true when the
// request is finished: the response was relayed (or cut after it started,
// or the connection became a tunnel). It returns false with a.Err set when
// the try failed before anything of the final response went to the client;
// then s.up may still hold the try (and s.held a response whose status the
// policy retries) for the caller to relay or drop.
func (s *Session) try(peer *Peer, pol *retry.Policy, a *Attempt) bool {
	if !s.connect(peer, pol, a) {
		return false
	}
	up := s.up
	s.buildUpstreamRequest(peer)
	// A retry resends what the client already sent of the body; a body
	// that arrived whole goes with the head.
	whole := s.body.prepare(pol)
	n, err := up.send(&s.upReq, s.framing, s.body.framed(), s.body.replay, whole, s.body.trailerFields())
	s.headWrote = n
	a.Wrote = n
	if err != nil {
		a.Err = fault.FromIO(err, fault.PhaseWrite)
		a.Err.Context = "writing the request to " + peer.Addr
		return false
	}
	if !whole {
		s.body.start(up, peer.Options)
	}
	if s.srv.expired.Load() {
		// The drain timeout passed while this try was on its way: the
		// cut Shutdown gave its connection may have come before this try
		// set its deadlines.
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

// connect takes a pooled connection to peer or dials one, into s.up (an h1up). Which
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
		switch pol.Reuse(s.Request.Method(), s.Request.Header.Has(pol.Header()), s.once, a.StaleResend) {
		case retry.ReuseAny:
			pc = s.srv.Pool.GetAt(key, nil, now)
		case retry.ReuseOnce:
			pc = s.srv.Pool.GetAt(key, &limits.Once, now)
		}
		if pc != nil {
			a.Reused = true
			a.IdleAge = now.Sub(pc.IdleSince)
			a.Served = pc.Served
			pc.Reader.SetReadTimeout(0)
			s.useH1(pc, opts)
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
		s.useH1(pool.NewConn(nc, key, limits, now), opts)
		return true
	}
	pc := pool.NewTLSConn(nc, tlsState.config, key, limits, now)
	if !s.handshake(pc, peer, tlsState, a) {
		pc.Close()
		return false
	}
	s.useH1(pc, opts)
	return true
}

// useH1 makes pc, an HTTP/1.1 connection, the try's.
func (s *Session) useH1(pc *pool.Conn, opts *PeerOptions) {
	s.h1u.use(pc, s, opts)
	s.setUp(&s.h1u)
}

// setUp makes up the try in progress (nil: none), where Shutdown and a
// client's reset can find it.
func (s *Session) setUp(up upstream) {
	s.up = up
	s.flight.set(up)
}

// readResponse reads response heads until the final one, relaying interim
// (1xx) responses, and then either relays the response or, when its status
// is one the policy retries, holds it for the caller's decision.
func (s *Session) readResponse(peer *Peer, a *Attempt) bool {
	up := s.up
	for {
		err := up.head(&s.resp)
		a.Read = up.read()
		if err != nil {
			if be := s.body.failure(up); be != nil {
				// The client's side failed while the upstream was
				// waiting for the body: that is the error to answer.
				a.Err = be
				return false
			}
			if fe, ok := err.(*fault.Error); ok {
				a.Err = fe
				a.Err.Context += " from " + peer.Addr
				return false
			}
			a.Err = fault.FromIO(err, fault.PhaseReadHead)
			a.Err.Context = "reading the response head from " + peer.Addr
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
		// RFC 9110 §15.2: a proxy forwards 1xx responses (the client's
		// wire knows whether its client can read them).
		if s.resp.Status == 100 {
			s.continued = true
		}
		if err := s.down.interim(&s.resp); err != nil {
			s.Err = clientErr(err, "writing an interim response to the client")
			s.abort()
			return true
		}
	}
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
// the body and drop the try, whose connection can no longer be trusted to
// be at a message boundary.
func (s *Session) dropUpstream() {
	up := s.up
	if up == nil {
		return
	}
	s.body.stop(up)
	s.setUp(nil)
	up.drop()
	s.held = false
}
