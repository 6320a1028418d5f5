package proxy

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/clock"
	"github.com/sluice-proxy/sluice/retry"
)

// Session is one request passing through the proxy, from its head being
// read to its last log line. Hooks receive it; it is valid until the
// Logging hook returns, after which sluice reuses it for the connection's
// next request.
type Session struct {
	// Request is the client's request head. Hooks may change it before the
	// upstream is chosen; the upstream gets a copy with hop-by-hop fields
	// removed and forwarding fields added.
	Request h1.Request
	// Client is the client's IP address; ClientIP is the same, parsed.
	// Behind a trusted proxy with Forwarding.ClientFromXFF, they are the
	// address its X-Forwarded-For names; Peer is always the address of
	// the connection the request came on.
	Client   string
	ClientIP netip.Addr
	Peer     string
	// TLS is the state of the client connection's TLS handshake; nil on a
	// plain connection. It must not be changed.
	TLS *tls.ConnectionState
	// Ctx is the Handler's own per-request state; nil at the start of
	// every request.
	Ctx any
	// Attempts lists the tries made so far, the failed ones with their
	// error and retry decision.
	Attempts []Attempt
	// Start is when the request head had been read.
	Start time.Time
	// Status is the status sent to the client, 0 if none was.
	Status int
	// BytesIn counts request body bytes read from the client; BytesOut
	// counts every byte written to the client.
	BytesIn, BytesOut int64
	// Err is the failure that ended the request, nil when it was answered
	// by an upstream (whatever the status) or by a hook.
	Err *fault.Error
	// Upgraded is set when the connection became a tunnel (101).
	Upgraded bool
	// Aborted is set when the response had started and could not be
	// finished: the client connection (an HTTP/2 client's stream) was
	// cut.
	Aborted bool
	// Stream is the request's HTTP/2 stream id; 0 for HTTP/1.x and
	// HTTP/3.
	Stream uint32
	// Early is set when the request came in TLS early data (QUIC 0-RTT),
	// which anyone who captured it may have replayed (RFC 8470): it is
	// forwarded only when its method is safe (GET, HEAD, OPTIONS) and it
	// has no body, with Early-Data: 1 added upstream; any other is
	// answered 425 Too Early, so that the client repeats it after the
	// handshake (invariant 10).
	Early bool

	srv       *Server
	c         *conn      // the client's connection: its addresses, TLS state, listener
	down      downstream // the client's side of the exchange: the connection, or an HTTP/2 stream of it
	wbuf      *[]byte    // the downstream's write buffer, which a try borrows for a request head
	flight    *flight    // where Shutdown and a client's reset find the try in progress
	grpc      bool       // a gRPC call (Content-Type application/grpc)
	http3     bool       // the request came on an HTTP/3 stream
	deadline  time.Time  // the call's grpc-timeout, as a time; zero: none
	hooks     *hooks
	framing   h1.Framing // of the request body, or frameErr: invalid
	frameErr  error
	framed    bool // framing and frameErr are set
	keepAlive bool // the client allows another request afterwards
	upgrade   bool // the client asked for a protocol upgrade
	body      reqBody
	upReq     h1.Request
	resp      h1.Response
	up        upstream // the upstream side of the current try: s.h1u or s.h2u
	h1u       h1up
	h2u       h2up
	held      bool      // a response head was read and awaits relay or retry
	respOut   outBody   // how the response's body comes
	trailers  h1.Header // the response's, once its body ended
	continued bool      // a 100 Continue went to the client
	ownAnswer bool      // the response is sluice's own (answer)
	headFault bool      // Err is the head's fault: timed out or malformed
	scratch   []byte
	notes     []slog.Attr        // what phases did, for the access log (Note)
	reqID     []byte             // the request's id (RequestID): in idBuf, or the trusted peer's field
	idBuf     [requestIDLen]byte // the id sluice made
	idOwn     bool               // reqID is sluice's, in idBuf
	route     string             // the route that took the request (SetRoute)
	headWrote int64              // bytes of this try's first write: the head, and a body sent with it
	extra     h1.Header          // fields for the client's response (AddResponseField)
	transform BodyFilter         // the response body's filter (FilterBody)
	filtered  filterOut          // what transform wrote, not yet sent
	local     localUp            // a Response standing in for an upstream's (AsUpstream)
	h1req     h1Request          // the body of a request from an HTTP/1.1 client
	tees      []ResponseTee      // observers of the response (Tee)
	teeEnded  bool               // the tees were told how it ended
	once      bool               // the request must reach the upstream at most once (Once)
	spawned   bool               // run by Spawn, for no client
	values    []keyValue         // the phases' own (SetValue)
	iov       [3][]byte          // the pieces of an HTTP/1.1 writev, and
	bufs      net.Buffers        //   what of them is left to write (conn.writev)
}

// reset prepares the session for the connection's next request, keeping
// its buffers.
func (s *Session) reset() {
	if s.transform != nil {
		s.dropFilter() // installed for a response that never came
	}
	attempts := s.Attempts[:cap(s.Attempts)]
	clear(attempts)
	clear(s.tees[:cap(s.tees)])
	clear(s.values[:cap(s.values)])
	done := s.body.done
	if done == nil {
		done = make(chan struct{}, 1)
	}
	// What the next request reuses is kept aside, and the rest zeroed in
	// place: a Session is large, and a new one built and copied over it
	// would cost twice its size in writes.
	req, upReq, resp, trailers, extra := s.Request, s.upReq, s.resp, s.trailers, s.extra
	srv, c, down, wbuf, flight := s.srv, s.c, s.down, s.wbuf, s.flight
	cbuf, rb := s.h1u.cbuf, s.h1u.rbody.b
	h2fields, seen, h2buf := s.h2u.fields, s.h2u.seen, s.h2u.rbody.buf
	replay, replayp, bodyTrailers := s.body.replay[:0], s.body.replayp, s.body.trailers
	scratch, notes, tees, values := s.scratch[:0], s.notes[:0], s.tees[:0], s.values[:0]
	localBuf, reqBody := s.local.rbody.buf, s.h1req.b
	*s = Session{}
	s.Request, s.Attempts, s.upReq, s.resp, s.trailers, s.extra = req, attempts[:0], upReq, resp, trailers, extra
	s.srv, s.c, s.down, s.wbuf, s.flight = srv, c, down, wbuf, flight
	s.h1u.cbuf, s.h1u.rbody.b = cbuf, rb
	s.h2u.fields, s.h2u.seen, s.h2u.rbody.buf = h2fields, seen, h2buf
	s.body.replay, s.body.replayp, s.body.done, s.body.trailers = replay, replayp, done, bodyTrailers
	s.scratch, s.notes, s.tees, s.values = scratch, notes, tees, values
	s.local.rbody.buf, s.h1req.b = localBuf, reqBody
	if s.flight != nil && s.flight.whole.Load() {
		// Stored only when set: an atomic store waits for the writes
		// before it, the whole Session's zeroing just above.
		s.flight.whole.Store(false)
	}
	s.extra.Reset()
	if l := s.c.ln; l != nil && l.altSvc != "" {
		s.extra.Add("Alt-Svc", l.altSvc)
	}
	s.Request.Reset()
	s.Client, s.Peer = s.c.client, s.c.client
	s.ClientIP = s.c.clientIP
	s.TLS = s.c.state
	if l := s.c.ln; l != nil && l.hooks != nil {
		s.hooks = l.hooks
	} else {
		s.hooks = s.srv.hooks.Load()
	}
}

// release gives the Session back to the pool, with its body's replay
// buffer: its next request may come from another connection.
func (s *Session) release() {
	if rb := &s.body; rb.replayp != nil {
		*rb.replayp = rb.replay[:0]
		putBuf(rb.replayp)
		rb.replayp, rb.replay = nil, nil
	}
	if s.transform != nil {
		s.dropFilter()
	}
	s.c, s.srv, s.hooks, s.down, s.wbuf, s.flight, s.up = nil, nil, nil, nil, nil, nil, nil
	s.h1u, s.h2u = h1up{cbuf: s.h1u.cbuf}, h2up{fields: s.h2u.fields[:0], seen: s.h2u.seen, rbody: h2Body{buf: s.h2u.rbody.buf}}
	s.body.src, s.body.s = nil, nil
	sessionPool.Put(s)
}

// Scratch returns a buffer the Handler may use for temporary bytes during
// the request (a hash key, say); it is reused by later requests.
func (s *Session) Scratch() []byte { return s.scratch[:0] }

// KeepScratch hands back a grown scratch buffer for reuse.
func (s *Session) KeepScratch(b []byte) { s.scratch = b[:0] }

// Note records, for the access log line of the request, what a phase did
// to it: the line ends with one key=value per note, in the order noted
// (compressed=zstd, rate_limited=true). Keys should be lower-case words
// joined by "_", and not those of the line's own fields.
func (s *Session) Note(key, value string) {
	s.notes = append(s.notes, slog.String(key, value))
}

// AddResponseField adds a field to the response the client gets for this
// request, whoever makes it: the upstream's (after the ResponseFilter
// hooks) or sluice's own answer (after AnswerFilter). A request phase
// calls it to say something about the request in its answer (a rate
// limit's RateLimit fields, say). The bytes are copied. A field that
// frames the message or belongs to the connection (Content-Length,
// Transfer-Encoding, Connection and the other hop-by-hop fields) is
// ignored: sluice sets those, and a second Content-Length would make the
// response unreadable, or worse, read two ways.
func (s *Session) AddResponseField(name, value []byte) {
	if h1.EqualFold(name, "Content-Length") || isConnectionFieldFold(name) {
		return
	}
	s.extra.AddBytes(name, value)
}

// Notes returns the notes recorded so far, for a Logger; the slice is
// reused by the connection's next request.
func (s *Session) Notes() []slog.Attr { return s.notes }

// SetRoute names the route that took the request, for the access log
// (route); a Handler that routes calls it, with a name of its own rather
// than one made per request.
func (s *Session) SetRoute(name string) { s.route = name }

// Route returns the name SetRoute gave the request's route, or "".
func (s *Session) Route() string { return s.route }

// LimitBody bounds the request body to n bytes of content (its data, not
// its chunked framing), n >= 0; a RequestFilter calls it. Called again, the
// lower limit holds. Called after the RequestFilter returned (from a later
// hook), or with n < 0, it does nothing.
//
// A request whose Content-Length is over n is answered 413 (Proxy-Status
// http_request_error) once the RequestFilter returns, before any upstream
// is chosen: nothing of it is sent, and the client connection closes after
// the answer, since the body was not read (a client that sent Expect:
// 100-continue gets the 413 and no 100). A body without a length (chunked,
// or HTTP/2 without content-length) is checked as it arrives: at the chunk
// that would take it past n, nothing more of it is sent, the try's
// upstream connection (an HTTP/2 upstream's stream) is closed, so the
// upstream never sees a complete request, and the client gets 413 if no
// byte of a response has gone to it, else its connection is cut. That
// request is never retried (the client's failure is a hard limit), and it
// does not count as unsent: its try's Wrote says what the upstream got,
// the head at least. The access log line of a request over its limit ends
// with body_limit=exceeded.
func (s *Session) LimitBody(n int64) { s.body.limitTo(n) }

// Server returns the server the session belongs to.
func (s *Session) Server() *Server { return s.srv }

// serve handles the request whose head is in s.Request and reports whether
// the connection may carry another.
func (s *Session) serve() bool {
	s.srv.inFlight.n.Add(1)
	defer s.srv.inFlight.n.Add(-1)
	return s.handle()
}

// handle is serve, between the counts of requests in flight.
func (s *Session) handle() bool {
	s.Start = clock.Now()
	req := &s.Request
	f, err := s.validate()
	if err != nil {
		s.answerBadRequest(err)
		return false
	}
	s.assignRequestID(true)
	s.keepAlive = h1.KeepAlive(req.Minor, &req.Header)
	if s.srv.Draining() {
		s.keepAlive = false
	}
	if s.c.trusted && s.srv.Forwarding.ClientFromXFF {
		s.clientFromXFF()
	}
	if req.Method() == "CONNECT" {
		// sluice is a reverse proxy, not a tunnel for clients.
		s.answer(Text(405, "405 Method Not Allowed: CONNECT is not supported\n"), false)
		s.finish()
		return false
	}
	if err := s.normalizeTarget(); err != nil {
		s.answerBadRequest(err)
		return false
	}
	if s.Early && !earlySafe(req.Method(), f) {
		s.answer(tooEarly, false)
		s.finish()
		return false
	}
	if exp := req.Header.Get("Expect"); exp != nil {
		switch {
		case !h1.EqualFold(exp, "100-continue"):
			// RFC 9110 §10.1.1: 417 for an expectation not met.
			s.answer(Text(417, "417 Expectation Failed\n"), false)
			s.finish()
			return false
		case req.Minor == 0:
			// RFC 9110 §10.1.1: ignore 100-continue from HTTP/1.0.
			req.Header.Del("Expect")
		}
	}
	s.upgrade = req.Header.Has("Upgrade") && req.Header.HasToken("Connection", "upgrade") &&
		!req.Header.HasToken("Upgrade", "h2c")
	// An upgrade to h2c (RFC 7540 §3.2, removed by RFC 9113) is not
	// taken: the request is served as HTTP/1.1, and Upgrade, a hop-by-hop
	// field, is not forwarded.
	s.body.init(s, f)
	if s.grpc = isGRPC(&req.Header); s.grpc {
		if d, ok := parseGRPCTimeout(req.Header.Get("Grpc-Timeout")); ok {
			s.deadline = s.Start.Add(d)
		}
	}

	if resp := s.filter(); resp != nil {
		if resp.AsUpstream {
			s.serveLocal(resp)
			s.finish()
			return s.keepAlive && !s.Aborted && s.body.complete()
		}
		s.answer(resp, s.keepAlive && s.framing.Empty())
		s.finish()
		return s.keepAlive && s.framing.Empty()
	}
	if e := s.body.lengthOver(); e != nil {
		// Over the body limit a RequestFilter set (LimitBody): 413, and
		// no upstream hears of it.
		s.answerError(e)
		s.finish()
		return false
	}
	s.proxy()
	s.finish()
	return s.keepAlive && !s.Aborted && !s.Upgraded && s.body.complete()
}

// filter asks the listener's Filter, then the Handler's RequestFilter, for
// an answer of their own; nil sends the request upstream.
func (s *Session) filter() *Response {
	if l := s.c.ln; l != nil && l.filter != nil {
		if resp := l.filter.RequestFilter(s); resp != nil {
			return resp
		}
	}
	if rf := s.hooks.requestFilter; rf != nil {
		return rf.RequestFilter(s)
	}
	return nil
}

// validate checks the request head's framing once per request: serve and
// ServeInline (through bodyToCome) both need it.
func (s *Session) validate() (h1.Framing, error) {
	if !s.framed {
		s.framing, s.frameErr = h1.ValidateRequest(&s.Request)
		if s.frameErr == nil {
			s.framing = s.down.framing(s.framing)
		}
		s.framed = true
	}
	return s.framing, s.frameErr
}

// bodyToCome reports, for ServeInline, how many bytes of the request's
// body are still to be read when preread can take it in whole (a
// Content-Length body of at most 64 KiB): 0 when the request has arrived
// whole. It is -1 for a request that is served reading the client as it
// goes: a chunked or larger body, an upgrade, or invalid framing (which
// serve answers).
func (s *Session) bodyToCome() int64 {
	f, err := s.validate()
	switch {
	case err != nil || s.Request.Header.Has("Upgrade"):
		return -1
	case f.Empty():
		return 0
	case f.Kind == h1.Length && f.Length <= prereadMax:
		return max(0, f.Length-int64(s.c.r.Buffered()))
	}
	return -1
}

// normalizeTarget turns an absolute-form target into origin-form with the
// target's authority as Host (RFC 9112 §3.2.2), and rejects the forms a
// reverse proxy cannot route.
func (s *Session) normalizeTarget() error {
	req := &s.Request
	t := req.Target()
	switch {
	case len(t) > 0 && t[0] == '/':
		return nil
	case len(t) == 1 && t[0] == '*' && req.Method() == "OPTIONS":
		return nil
	}
	i := bytes.Index(t, []byte("://"))
	if i <= 0 || !(h1.EqualFold(t[:i], "http") || h1.EqualFold(t[:i], "https")) {
		return &h1.Error{Status: 400, Msg: "request target is not origin-form or absolute-form"}
	}
	rest := t[i+3:]
	end := bytes.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority := string(rest[:end])
	if bytes.IndexByte(rest[:end], '@') >= 0 || authority == "" {
		return &h1.Error{Status: 400, Msg: "invalid authority in absolute-form target"}
	}
	path := string(rest[end:])
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	req.Header.Set("Host", authority)
	req.SetTarget(path)
	return nil
}

// proxy runs the attempt loop: pick a peer, try it, and on failure gather
// the facts of the wire and act on the retry decision taken from them.
func (s *Session) proxy() {
	s.body.preread()
	var first time.Time
	for {
		again := len(s.Attempts) > 0
		if again {
			if ok, why := retry.Again(retry.Between{Drained: s.srv.expired.Load(), CallExpired: s.callExpired()}); !ok {
				s.giveUp(why)
				return
			}
		}
		peer, err := s.hooks.h.UpstreamPeer(s)
		if err != nil || peer == nil {
			if again {
				s.giveUp("not retried: no server left for another try: " + noPeer(err).Error())
				return
			}
			s.answerError(noPeer(err))
			return
		}
		if again {
			// A handler that ignores Excluded may choose a server this
			// request must not go to again; it is still told the try it
			// chose ended.
			if ok, why := retry.Again(retry.Between{Excluded: s.Excluded(peer.Addr), Peer: peer.Addr}); !ok {
				s.refuse(peer)
				s.giveUp(why)
				return
			}
		}
		pol := peer.Options.policy()
		now := clock.Now()
		if first.IsZero() {
			first = now
			pol.Begin(now)
		}
		s.Attempts = append(s.Attempts, Attempt{Peer: peer, Start: now})
		a := &s.Attempts[len(s.Attempts)-1]
		if n := len(s.Attempts); n > 1 {
			a.StaleResend = s.Attempts[n-2].Stale()
		}

		done := s.try(peer, pol, a)
		a.Duration = time.Since(a.Start)
		if done {
			s.tryDone(a)
			return
		}
		// A wait cut short because the client gave up, or because the drain
		// timeout passed, is not the upstream's failure.
		a.Err = retry.Blame(a.Err, s.down.gone(), s.srv.expired.Load(), peer.Addr)
		f := s.facts(pol, a, first)
		if s.up != nil && f.Stale() {
			s.up.died() // the pool learns from it
		}
		e := a.Err
		e.Retry, e.Why = pol.Allow(&f)
		e = s.hook(peer, a, f)
		a.Err = e
		var limit retry.Limit
		e.Retry, e.Why, limit = pol.Enforce(&f, e.Retry, e.Why)
		if o := s.srv.Observer; o != nil && limit == retry.LimitBudget {
			o.BudgetDenied(s, peer)
		}
		s.tryDone(a)
		s.logTry(a, !e.Retry)
		if !e.Retry {
			if s.held {
				// The policy retries this status, but not this time: the
				// upstream's own response goes to the client as it came.
				s.relay(peer, a)
				return
			}
			s.dropUpstream()
			s.answerError(e)
			return
		}
		s.dropUpstream()
		if d := s.backoff(pol, peer); d > 0 {
			time.Sleep(d)
		}
	}
}

// facts gathers what the engine knows of a's failure, for the decision.
func (s *Session) facts(pol *retry.Policy, a *Attempt, first time.Time) retry.Facts {
	return retry.Facts{
		Method:         s.Request.Method(),
		Keyed:          s.Request.Header.Has(pol.Header()),
		Err:            a.Err,
		Source:         a.Err.Source,
		Reused:         a.Reused,
		Wrote:          a.Wrote,
		Read:           a.Read,
		SentDownstream: s.Status != 0,
		Replayable:     s.body.replayable(),
		Try:            len(s.Attempts),
		Elapsed:        time.Since(first),
		Once:           s.once,
	}
}

// hook lets the Handler adjust the policy's decision after a failed try.
func (s *Session) hook(peer *Peer, a *Attempt, f retry.Facts) *fault.Error {
	e := a.Err
	if s.up == nil || (e.Source == fault.Upstream && e.Kind.Connect()) {
		// No connection was made: refused, unreachable, timed out, its
		// TLS handshake failed (TLS 1.3's late refusal of sluice's
		// certificate included), or sluice out of descriptors or ports.
		if h := s.hooks.failToConnect; h != nil {
			if e2 := h.FailToConnect(s, peer, e, f); e2 != nil {
				e = e2
			}
		}
		return e
	}
	if h := s.hooks.errorWhileProxy; h != nil {
		if e2 := h.ErrorWhileProxy(s, peer, e, f); e2 != nil {
			e = e2
		}
	}
	return e
}

// giveUp ends a request whose last try was to be retried but cannot be:
// that try's failure is the answer.
func (s *Session) giveUp(why string) {
	a := &s.Attempts[len(s.Attempts)-1]
	e := a.Err
	e.Retry, e.Why = false, why
	s.logTry(a, true)
	s.answerError(e)
}

// callExpired reports whether the call's own deadline (grpc-timeout)
// passed.
func (s *Session) callExpired() bool {
	return !s.deadline.IsZero() && !clock.Now().Before(s.deadline)
}

// refuse tells the Handler that the try it chose on peer was not made.
func (s *Session) refuse(peer *Peer) {
	if h := s.hooks.tryDone; h != nil {
		h.TryDone(s, &Attempt{Peer: peer, Start: clock.Now(), Err: &fault.Error{
			Kind: fault.NoUpstream, Source: fault.Internally,
			Context: "not sent to " + peer.Addr + ": this request must not go to it again",
		}})
	}
}

// backoff returns the wait before the next try when the peer that just
// failed has failed this request before (there is no wait before a try on
// another server, which is what a balancer offers first).
func (s *Session) backoff(pol *retry.Policy, peer *Peer) time.Duration {
	if pol == nil || pol.Backoff.Base <= 0 {
		return 0
	}
	n := 0
	for i := range s.Attempts {
		if s.Attempts[i].Peer != nil && s.Attempts[i].Peer.Addr == peer.Addr {
			n++
		}
	}
	return pol.Backoff.Delay(n, nil)
}

// Tried reports whether peer has already been tried for this request and
// failed.
func (s *Session) Tried(addr string) bool {
	for i := range s.Attempts {
		if a := &s.Attempts[i]; a.Err != nil && a.Peer != nil && a.Peer.Addr == addr {
			return true
		}
	}
	return false
}

// Excluded reports whether the request must not go to addr again
// (Attempt.Excludes): a try there timed out after the request was sent, and
// the server may still be working on it; or its certificate did not verify,
// or it refused the TLS handshake, as it would again. The request goes to
// another server, or that failure is the answer. Handlers must not choose an excluded peer; the
// engine refuses one.
func (s *Session) Excluded(addr string) bool {
	for i := range s.Attempts {
		if a := &s.Attempts[i]; a.Peer != nil && a.Peer.Addr == addr && a.Excludes() {
			return true
		}
	}
	return false
}

// noPeer turns a Handler's refusal into the error to answer with.
func noPeer(err error) *fault.Error {
	if fe, ok := err.(*fault.Error); ok {
		return fe
	}
	if err == nil {
		return &fault.Error{Kind: fault.NoUpstream, Source: fault.Internally, Context: "no upstream peer chosen"}
	}
	return &fault.Error{Kind: fault.Internal, Source: fault.Internally, Context: "choosing an upstream", Cause: err}
}

// finish reports a client fault that ended the request, logs the request
// and tells the observer.
func (s *Session) finish() {
	s.teeAbort() // a response that never came, or was not relayed whole
	if s.body.over {
		s.Note("body_limit", "exceeded")
	}
	if e := s.Err; e != nil && e.Source == fault.Downstream {
		stage := InResponse
		switch {
		case s.headFault:
			stage = InHead
		case e == s.body.err:
			stage = InBody
		}
		s.srv.clientFault(s, s.Client, stage, e)
	}
	if o := s.srv.Observer; o != nil {
		o.Done(s)
	}
	if l := s.hooks.logger; l != nil {
		l.Logging(s)
	} else if s.srv.AccessLog != nil {
		s.logAccess()
	}
}

// tryDone reports a finished try to the handler and the observer.
func (s *Session) tryDone(a *Attempt) {
	if a.Wait == 0 {
		a.Wait = a.Duration
	}
	if h := s.hooks.tryDone; h != nil {
		h.TryDone(s, a)
	}
	if o := s.srv.Observer; o != nil {
		o.Try(s, a)
	}
}
