// Package proxy is sluice's request main line: it accepts client
// connections, reads requests with sluice's own HTTP/1.1 and HTTP/2 wire
// code, asks a
// Handler where each request goes, tries upstreams until one answers or the
// retry policy says stop, and streams the answer back.
//
// The main line, from accept to log, reads top to bottom in server.go
// (listeners, shutdown), listener.go and tls.go (TLS listeners, the
// handshake), conn.go (the connection loop), h2.go (an HTTP/2 connection),
// session.go (one request and its attempt loop), attempt.go (one try),
// body.go (the request body, duplex and replay), relay.go (the response),
// and answer.go (answers sluice writes itself, and the logs). The main line
// speaks to both sides through the exchange (exchange.go): each wire
// implements its side, an HTTP/1.1 client connection (h1down.go), a stream
// of an HTTP/2 client connection (h2down.go, h2fields.go), a pooled
// HTTP/1.1 upstream connection (h1up.go), a stream of an HTTP/2 upstream
// connection (h2up.go, upstreamh2.go). Around them: handler.go (the
// Handler, its hooks, peers), headers.go (hop-by-hop and forwarding
// fields), buffers.go, park.go (what becomes of a client connection that
// waits without a goroutine), hello_*.go (a ClientHello waited for without
// one), workers.go (the goroutines that serve connections), and accept.go
// (failed accepts). The socket-level machinery is in rooms of its own
// below: proxy/internal/ready (reading a socket without holding a
// buffer), proxy/internal/park (connections held without a goroutine, in
// one epoll set), proxy/internal/spare (clients answered when sluice is
// out of descriptors).
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/h2"
	"github.com/sluice-proxy/sluice/h3"
	"github.com/sluice-proxy/sluice/internal/workers"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy/internal/park"
)

// Server serves HTTP/1.1 and HTTP/2 clients on its listeners, plain or
// over TLS (ServeTLS, ServeWith), and proxies their requests as its Handler decides. Set the fields before the first Serve and do not
// change them afterwards; the Handler alone can be swapped while serving
// (SetHandler). The zero value of every field but Handler has the
// documented default. The first Serve starts background goroutines (the
// pool's idle watcher when the Server makes its own pool, and on Linux the
// parker of idle client connections); Shutdown stops them, and the idle
// workers that wait to serve the next connection.
type Server struct {
	// Handler decides where requests go; its optional hook interfaces are
	// discovered when it is set.
	Handler Handler

	// HeaderTimeout bounds reading each request head, counted from its
	// first byte; 0 means 10s.
	HeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection; 0 means 60s.
	IdleTimeout time.Duration
	// BodyTimeout bounds each wait for request body bytes; 0 means 60s.
	BodyTimeout time.Duration
	// StreamIdleTimeout replaces BodyTimeout and the peers' ReadTimeout for
	// a gRPC call (a request whose Content-Type is application/grpc) once
	// its response head has come: a stream with no bytes either way for
	// this long is cut. Long-lived gRPC streams are quiet for minutes; 0
	// means 5m.
	StreamIdleTimeout time.Duration
	// SendTimeout bounds each write to the client; 0 means 60s. It is
	// enforced lazily: a write may run up to a sixteenth of it (at most a
	// second) longer, never shorter.
	SendTimeout time.Duration
	// MaxHeaderBytes bounds a request head (431 above it); 0 means 64 KiB.
	MaxHeaderBytes int
	// MaxHeaders bounds the number of request header fields (431 above
	// it); 0 means 100.
	MaxHeaders int
	// Forwarding turns off the fields added to requests sent upstream.
	Forwarding Forwarding
	// H2 bounds what a client may do on an HTTP/2 connection (streams,
	// windows, header lists); its zero fields take h2's defaults. Its
	// IdleTimeout is IdleTimeout's, and a nil ErrorLog is ErrorLog.
	H2 h2.Settings
	// H2Upstream bounds what an HTTP/2 upstream may do on a connection
	// (PeerOptions.Protocol); its zero fields take h2's defaults.
	H2Upstream h2.ClientSettings
	// H3 bounds what a client may do on an HTTP/3 connection (ServeQUIC):
	// its header lists; its streams and idle timeout are the QUICSocket's
	// (QUICOptions.H3). Its HeaderTimeout is HeaderTimeout's, and a nil
	// ErrorLog is ErrorLog.
	H3 h3.Settings

	// Pool holds idle upstream connections; nil means a pool of at most
	// 1024 idle connections, created by the first Serve and closed by
	// Shutdown.
	Pool *pool.Pool
	// ErrorLog receives one line per failed try and per proxy-made error;
	// nil means slog.Default(). Client faults (header timeouts, malformed
	// heads, clients gone mid-request) get a line each at debug level, and
	// otherwise at most five lines a second at info, each with the number
	// left out (the Observer counts them all: ClientFaultObserver).
	ErrorLog *slog.Logger
	// AccessLog, when set, receives one line per request unless the
	// Handler implements Logger.
	AccessLog *slog.Logger
	// Observer, when set, is told about every try and request (metrics),
	// and about every client fault when it is a ClientFaultObserver.
	Observer Observer

	mux        *muxSet // HTTP/2 connections to upstreams, perhaps shared (ShareUpstreamConns)
	hooks      atomic.Pointer[hooks]
	faultLines logSampler // client-fault lines at info level

	exhausted logSampler // the lines of tries that found sluice out of descriptors or ports

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	streams   map[stream]struct{}       // the HTTP/3 streams being served (an HTTP/2 connection keeps its own: conn.streams)
	quic      map[QUICListener]struct{} // the HTTP/3 listeners (h3.go)
	h3conns   map[*quicConn]struct{}    // the HTTP/3 connections (h3.go)
	spawned   map[*nobody]struct{}      // the spawned requests running (Session.Spawn)
	draining  atomic.Bool               // read on every request
	// inFlight counts the requests between their head and their end
	// (Session.serve). It changes twice per request, from every core, so
	// it has a cache line of its own, away from draining's.
	inFlight struct {
		_ [64]byte
		n atomic.Int64
		_ [56]byte
	}
	// expired is set when Shutdown's context ended with requests still in
	// flight; expire cancels the dials of their tries.
	expired     atomic.Bool
	expire      context.Context
	cancelDials context.CancelFunc
	parker      *parker              // holds idle client connections without goroutines; nil where unsupported
	answering   chan struct{}        // a slot per goroutine answering a parked head that expired
	workers     *workers.Pool[*conn] // the goroutines that serve connections (workers.go)
	ownPool     bool
	muxClosed   bool // Shutdown let mux go (under mu)
	inited      bool
	wg          sync.WaitGroup
}

// Forwarding lists the request fields sluice adds; each is on unless
// turned off here. What a client sent in X-Forwarded-For, -Proto and
// -Host is replaced, since a client could claim any address or scheme
// there, unless it is a Trusted peer: a load balancer or proxy in front of
// sluice, whose fields say what its own client did.
type Forwarding struct {
	// X-Forwarded-For: the client's address; from a trusted peer,
	// appended to the list it sent.
	NoXForwardedFor bool
	// X-Forwarded-Proto: http or https; a trusted peer's kept.
	NoXForwardedProto bool
	// X-Forwarded-Host: the Host the client sent; a trusted peer's kept.
	NoXForwardedHost bool
	NoVia            bool // Via: "1.1 sluice", appended (RFC 9110 §7.6.3)
	// X-Request-Id: the request's id (Session.RequestID), a trusted
	// peer's kept, any other client's replaced by one sluice makes (32
	// hex digits). It goes upstream, back to the client on every answer
	// (an upstream's response that has its own keeps it), and into the
	// access log (request_id).
	NoRequestID bool
	// Trusted are the peers whose X-Forwarded-For, -Proto and -Host (and
	// X-Request-Id) are kept, each an address prefix (10.0.0.0/8;
	// 127.0.0.1/32 for one address). nil trusts none. IPv4-mapped IPv6
	// clients are matched as IPv4.
	Trusted []netip.Prefix
	// TrustUnix trusts the peers of Unix socket listeners as Trusted
	// does an address's (nginx's set_real_ip_from unix:): a proxy in
	// front of sluice on the same host.
	TrustUnix bool
	// ClientFromXFF makes a Trusted peer's X-Forwarded-For say who the
	// client is, as nginx's real_ip module does (with real_ip_recursive):
	// the client is the rightmost address in it that is not itself
	// Trusted (the leftmost when all are; the peer when the field is
	// missing or its rightmost entry is not an address). Session.Client
	// and ClientIP are then that address for everything that judges the
	// client: hooks, allow and deny lists, rate limits and hash balancing
	// by address, and the access log, which adds peer= (Session.Peer,
	// the connection's address) when they differ. The X-Forwarded-For
	// sent upstream still extends the list with the peer's address.
	ClientFromXFF bool
}

// UnixClient is the client's address (Session.Client, Peer) on a Unix
// socket listener, whose peers have none: "unix:", as nginx's
// $remote_addr. It goes into X-Forwarded-For and the access log as any
// address would; Session.ClientIP is the zero netip.Addr, in no prefix.
const UnixClient = "unix:"

// trusts reports whether the X-Forwarded-* fields of the client at ip
// are kept.
func (f *Forwarding) trusts(ip netip.Addr) bool {
	for _, p := range f.Trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Observer is told what the proxy does, for metrics. Its methods are called
// from connection goroutines concurrently and must not block. It may also
// be a ShedObserver.
type Observer interface {
	// Try is called after each try of a request.
	Try(s *Session, a *Attempt)
	// Done is called once per request, before logging.
	Done(s *Session)
	// BudgetDenied is called when the retry budget refused a retry.
	BudgetDenied(s *Session, peer *Peer)
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("proxy: server closed")

// hooks caches the Handler's optional interfaces.
type hooks struct {
	h                     Handler
	requestFilter         RequestFilter
	upstreamRequestFilter UpstreamRequestFilter
	upstreamResponse      UpstreamResponseFilter
	responseFilter        ResponseFilter
	answerFilter          AnswerFilter
	failToConnect         FailToConnect
	errorWhileProxy       ErrorWhileProxy
	failToProxy           FailToProxy
	tryDone               TryDone
	logger                Logger
}

// SetHandler replaces the Handler; requests that have started keep the one
// they started with. It is safe to call while serving.
func (srv *Server) SetHandler(h Handler) { srv.hooks.Store(newHooks(h)) }

// ShareUpstreamConns has srv take its HTTP/2 streams to upstreams on
// from's connections, and open new ones beside them, as the two servers'
// HTTP/1.1 tries share one Pool: a reload's new server goes on with the
// old one's connections instead of dialing each server again. They close
// with the last of the two servers' Shutdowns. Call it before srv serves;
// it does nothing when from has shut down.
func (srv *Server) ShareUpstreamConns(from *Server) {
	from.mu.Lock()
	if from.mux == nil {
		from.mux = &muxSet{}
	}
	m := from.mux
	from.mu.Unlock()
	if m.share() {
		srv.mu.Lock()
		srv.mux = m
		srv.mu.Unlock()
	}
}

func newHooks(h Handler) *hooks {
	hk := &hooks{h: h}
	hk.requestFilter, _ = h.(RequestFilter)
	hk.upstreamRequestFilter, _ = h.(UpstreamRequestFilter)
	hk.upstreamResponse, _ = h.(UpstreamResponseFilter)
	hk.responseFilter, _ = h.(ResponseFilter)
	hk.answerFilter, _ = h.(AnswerFilter)
	hk.failToConnect, _ = h.(FailToConnect)
	hk.errorWhileProxy, _ = h.(ErrorWhileProxy)
	hk.failToProxy, _ = h.(FailToProxy)
	hk.tryDone, _ = h.(TryDone)
	hk.logger, _ = h.(Logger)
	return hk
}

func (srv *Server) init() {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.inited {
		return
	}
	srv.inited = true
	if srv.hooks.Load() == nil && srv.Handler != nil {
		srv.SetHandler(srv.Handler)
	}
	if srv.Pool == nil {
		srv.Pool = pool.New(1024, nil)
		srv.ownPool = true
	}
	if srv.mux == nil {
		srv.mux = &muxSet{}
	}
	if srv.ErrorLog == nil {
		srv.ErrorLog = slog.Default()
	}
	srv.listeners = make(map[net.Listener]struct{})
	srv.conns = make(map[*conn]struct{})
	srv.streams = make(map[stream]struct{})
	srv.quic = make(map[QUICListener]struct{})
	srv.h3conns = make(map[*quicConn]struct{})
	srv.spawned = make(map[*nobody]struct{})
	srv.workers = workers.New((*conn).serve, maxIdleWorkers, workerIdle)
	srv.expire, srv.cancelDials = context.WithCancel(context.Background())
	srv.parker = park.New[*conn]()
	srv.answering = make(chan struct{}, maxAnswering)
}

func (srv *Server) headerTimeout() time.Duration { return orDefault(srv.HeaderTimeout, 10*time.Second) }
func (srv *Server) idleTimeout() time.Duration   { return orDefault(srv.IdleTimeout, 60*time.Second) }
func (srv *Server) bodyTimeout() time.Duration   { return orDefault(srv.BodyTimeout, 60*time.Second) }
func (srv *Server) streamIdle() time.Duration    { return orDefault(srv.StreamIdleTimeout, 5*time.Minute) }
func (srv *Server) sendTimeout() time.Duration   { return orDefault(srv.SendTimeout, 60*time.Second) }

func (srv *Server) maxHeaderBytes() int {
	if srv.MaxHeaderBytes <= 0 {
		return 64 << 10
	}
	return srv.MaxHeaderBytes
}

func (srv *Server) maxHeaders() int {
	if srv.MaxHeaders <= 0 {
		return 100
	}
	return srv.MaxHeaders
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// track admits ln, a listener or a QUIC listener served with l, to set,
// one of the Server's sets that Shutdown closes; it refuses it, closing
// it, when the Server has no Handler or drains. untrack takes ln out and
// closes it: the serving loop defers it.
func track[L interface {
	comparable
	Close() error
	Addr() net.Addr
}](srv *Server, set map[L]struct{}, ln L, l *listener) (untrack func(), err error) {
	if srv.hooks.Load() == nil && l.hooks == nil {
		ln.Close()
		return nil, errors.New("proxy: Server has no Handler")
	}
	srv.mu.Lock()
	if srv.draining.Load() {
		srv.mu.Unlock()
		ln.Close()
		return nil, ErrServerClosed
	}
	set[ln] = struct{}{}
	srv.wg.Add(1)
	srv.mu.Unlock()
	l.addr = ln.Addr().String()
	return func() {
		srv.mu.Lock()
		delete(set, ln)
		srv.mu.Unlock()
		ln.Close()
		srv.wg.Done()
	}, nil
}

// Serve accepts connections on ln until Shutdown, when it returns
// ErrServerClosed, and serves each on a goroutine of its own while it lasts
// (a worker that may have served earlier ones; workers.go). It closes ln on
// return. A listener whose connections are *tls.Conn (tls.NewListener's)
// is served as ServeTLS serves, its config as it is.
func (srv *Server) Serve(ln net.Listener) error {
	return srv.ServeWith(ln, ListenerOptions{})
}

// serve is Serve for a listener l.
func (srv *Server) serve(ln net.Listener, l *listener) error {
	untrack, err := track(srv, srv.listeners, ln, l)
	if err != nil {
		return err
	}
	defer untrack()

	st := newAcceptState(l.shed) // the back-off, and a descriptor in reserve (accept.go)
	defer st.close()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if srv.draining.Load() {
				return ErrServerClosed
			}
			wait, ok := srv.acceptFailed(ln, st, err)
			if !ok {
				return err
			}
			time.Sleep(wait)
			continue
		}
		st.accepted()
		c := newConn(srv, nc, l)
		srv.mu.Lock()
		if srv.draining.Load() {
			srv.mu.Unlock()
			nc.Close()
			continue
		}
		srv.conns[c] = struct{}{}
		srv.wg.Add(1)
		srv.mu.Unlock()
		srv.start(c)
	}
}

// ListenAndServe listens on the TCP address addr (see Listen) and calls
// Serve.
func (srv *Server) ListenAndServe(addr string) error {
	ln, err := Listen(addr)
	if err != nil {
		return err
	}
	return srv.Serve(ln)
}

// Listen listens on a TCP address for client connections, without TCP
// keep-alive probes on the accepted connections: the idle and header
// timeouts already end a silent connection, and the probes cost system
// calls on every accept. On Linux, accept waits for the client's first
// bytes (TCP_DEFER_ACCEPT), so a connection reaches Serve with its request.
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: deferAccept}
	return lc.Listen(context.Background(), "tcp", addr)
}

// Shutdown drains the Server as Drain does and closes its QUIC listeners
// too, lets requests in flight finish, and closes each connection once its
// response is out. When ctx ends first, the drain is over, whatever the
// upstreams do: every request still waiting for its upstream is answered
// 503 (fault.Drained, with Proxy-Status and Connection: close) where
// nothing of a response has gone to its client, every response under way
// is aborted (the client sees a reset), and within drainGrace every
// connection left is reset. Shutdown then returns ctx's error. It closes
// the Server's own pool last.
func (srv *Server) Shutdown(ctx context.Context) error {
	srv.Drain()
	srv.mu.Lock()
	for ln := range srv.quic {
		ln.Close()
	}
	srv.mu.Unlock()

	done := make(chan struct{})
	go func() {
		srv.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		srv.expireDrain(done)
	}
	srv.mu.Lock()
	m := srv.mux
	if srv.muxClosed {
		m = nil // a second Shutdown: the set is let go once
	}
	srv.muxClosed = true
	srv.mu.Unlock()
	if m != nil {
		m.close()
	}
	if srv.ownPool {
		srv.Pool.Close()
	}
	return err
}

// Drain begins Shutdown's drain and returns at once: from its return on,
// the Server takes no new request. Its listeners stop accepting, its
// HTTP/2 and HTTP/3 connections are sent GOAWAY (the requests under way
// go on; a client sends its next ones elsewhere, and a stream it opened
// past the GOAWAY is refused as never processed, which any client may
// send again), its idle HTTP/1.1 connections close and the others do
// once their response is out. Its QUIC listeners go on taking the
// connections whose handshake completes, each sent GOAWAY with the id 0
// at once, until Shutdown (or their owner) closes them: a process that
// hands its QUIC socket to another lets the handshakes begun with it
// complete rather than fail, and must not take their requests, which the
// client sends again on a new connection. Call Shutdown afterwards, which
// waits for the requests under way; Drain may be called more than once.
func (srv *Server) Drain() {
	srv.init()
	srv.mu.Lock()
	if !srv.draining.Swap(true) {
		srv.workers.Close()
	}
	for ln := range srv.listeners {
		ln.Close()
	}
	for qc := range srv.h3conns {
		qc.hc.Shutdown() // GOAWAY: the streams open finish, no new one starts
	}
	for c := range srv.conns {
		c.wakeIfIdle()
		if hc := c.h2.Load(); hc != nil {
			hc.Shutdown() // GOAWAY: the streams open finish, no new one starts
		}
	}
	srv.mu.Unlock()
	srv.closeParked()
}

// drainGrace is how long the requests in flight when the drain timeout
// passes get to write their answer (a 503, or the abort of a response under
// way) before every connection left is reset.
const drainGrace = 250 * time.Millisecond

// expireDrain ends the drain: each connection's wait for its upstream is
// cut short (its try then fails as fault.Drained, which no retry follows),
// dials in progress are cancelled, and after drainGrace the client
// connections still open are reset. It returns when every connection is
// done.
func (srv *Server) expireDrain(done <-chan struct{}) {
	srv.expired.Store(true)
	srv.cancelDials()
	now := time.Now()
	srv.mu.Lock()
	for c := range srv.conns {
		c.flight.cut(now)
		c.eachStream(func(x *h2exchange) { x.inFlight().cut(now) })
	}
	for x := range srv.streams {
		x.inFlight().cut(now)
	}
	for n := range srv.spawned {
		n.flight.cut(now)
	}
	srv.mu.Unlock()
	select {
	case <-done:
		return
	case <-time.After(drainGrace):
	}
	srv.mu.Lock()
	for c := range srv.conns {
		c.resetNow()
		c.flight.cut(now) // a try begun since is cut too
		c.eachStream(func(x *h2exchange) {
			x.abort()
			x.inFlight().cut(now)
		})
	}
	for x := range srv.streams {
		x.abort()
		x.inFlight().cut(now)
	}
	for qc := range srv.h3conns {
		qc.hc.Close()
	}
	for n := range srv.spawned {
		n.flight.cut(now)
	}
	srv.mu.Unlock()
	<-done
}

// Draining reports whether Shutdown has begun.
func (srv *Server) Draining() bool { return srv.draining.Load() }

// InFlight returns the number of requests being served now: read whole
// head, not yet answered in full, on every listener and protocol.
func (srv *Server) InFlight() int64 { return srv.inFlight.n.Load() }

// Connections reports each open client connection with the address of
// the listener that accepted it and its protocol: "h3" for a QUIC
// connection, "h2" once it speaks HTTP/2, "http/1.1" before (a TLS
// connection still in its handshake included). It holds the server's lock while it reports: report must
// not call back into the Server. For metrics, at scrape time.
func (srv *Server) Connections(report func(listener, protocol string)) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for c := range srv.conns {
		addr := ""
		if c.ln != nil {
			addr = c.ln.addr
		}
		proto := "http/1.1"
		if c.h2.Load() != nil {
			proto = "h2"
		}
		report(addr, proto)
	}
	for qc := range srv.h3conns {
		report(qc.c.ln.addr, "h3")
	}
}

// stream is a stream of a multiplexed client connection being served
// (h2exchange, h3exchange), for Shutdown to cut short when the drain
// timeout passes.
type stream interface {
	inFlight() *flight
	abort()
}

func (srv *Server) forget(c *conn) {
	srv.mu.Lock()
	delete(srv.conns, c)
	srv.mu.Unlock()
	srv.wg.Done()
}
