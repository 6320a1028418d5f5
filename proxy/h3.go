package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/sluice-proxy/sluice/h3"
)

// HTTP/3 from clients. A QUIC connection (quic-go) is served by the h3
// wire (package h3); each of its request streams becomes a Session like an
// HTTP/1.1 request or an HTTP/2 stream, its downstream the stream itself
// (h3exchange, h3down.go): the main line, hooks, retries, balancing, access
// log and Proxy-Status do not change with the protocol.

// QUICListener is where ServeQUIC takes QUIC connections from: a
// QUICSocket's (which hands each connection to the Server serving it
// now), or quic-go's EarlyListener. Accept must return once Close is
// called.
type QUICListener interface {
	Accept(ctx context.Context) (*quic.Conn, error)
	Close() error
	Addr() net.Addr
}

// quicConn is an HTTP/3 client connection being served.
type quicConn struct {
	c  *conn // what a Session knows of its client: addresses, listener, TLS state
	hc *h3.Conn

	tlsOnce sync.Once
	tls     *tls.ConnectionState // once the handshake is complete
}

// ServeQUIC serves HTTP/3 on the QUIC connections ln accepts until
// Shutdown, when it returns ErrServerClosed, or until ln is closed. The
// listener's TLS config (QUICSocket) must offer the ALPN protocol "h3".
// opts.Handler and opts.Filter apply as ServeWith has them; opts.TLS and
// opts.Protocols are the listener's business, and ignored. Shutdown (and
// Drain, before it) sends each connection GOAWAY: the requests under way
// finish, and the client sends its next ones on a new connection; after
// Drain the loop goes on taking connections, each sent GOAWAY at once,
// until Shutdown or ln.Close. Requests that come in 0-RTT
// are served by the rules of early data (Session.Early).
func (srv *Server) ServeQUIC(ln QUICListener, opts ListenerOptions) error {
	srv.init()
	l := &listener{filter: opts.Filter, tls: &tls.Config{}}
	if opts.Handler != nil {
		l.hooks = newHooks(opts.Handler)
	}
	untrack, err := track(srv, srv.quic, ln, l)
	if err != nil {
		return err
	}
	defer untrack()
	for {
		qc, err := ln.Accept(context.Background())
		if err != nil {
			if srv.draining.Load() {
				return ErrServerClosed
			}
			return err
		}
		srv.serveQUICConn(qc, l)
	}
}

// serveQUICConn starts serving one QUIC connection.
func (srv *Server) serveQUICConn(qc *quic.Conn, l *listener) {
	c := &conn{srv: srv, ln: l}
	if a, ok := qc.RemoteAddr().(*net.UDPAddr); ok {
		c.clientIP = a.AddrPort().Addr().Unmap()
		c.client = c.clientIP.String()
	}
	c.trusted = srv.Forwarding.trusts(c.clientIP)
	q := &quicConn{c: c}
	settings := srv.H3
	settings.HeaderTimeout = srv.headerTimeout()
	if settings.ErrorLog == nil {
		settings.ErrorLog = srv.ErrorLog
	}
	q.hc = h3.NewConn(qc, &settings, q.serveStream)
	srv.mu.Lock()
	draining := srv.draining.Load()
	srv.h3conns[q] = struct{}{}
	srv.wg.Add(1) // the accept loop's count is held: not from 0
	srv.mu.Unlock()
	if draining {
		// Its handshake completed before the socket stopped taking new
		// connections, and the drain has begun (Drain, Shutdown): GOAWAY
		// at once, with the id 0, so that the client sends every request
		// it made on it again elsewhere, none processed.
		q.hc.Shutdown()
	}
	go func() {
		defer func() {
			srv.mu.Lock()
			delete(srv.h3conns, q)
			srv.mu.Unlock()
			srv.wg.Done()
		}()
		q.hc.Serve()
		// Serve returns when the connection is done, or went away with
		// its last request; requests still running (a connection that
		// died under them) end on their own, counted in srv.streams.
	}()
}

// tlsState returns the connection's TLS state: once its handshake is
// complete, the one made then; before (a request in 0-RTT), as it is.
func (q *quicConn) tlsState() *tls.ConnectionState {
	qc := q.hc.QUIC()
	select {
	case <-qc.HandshakeComplete():
		q.tlsOnce.Do(func() {
			st := qc.ConnectionState().TLS
			q.tls = &st
		})
		return q.tls
	default:
		st := qc.ConnectionState().TLS
		return &st
	}
}

// QUICOptions say how a QUICSocket takes connections. They may change
// while it serves (QUICSocket.Set): new handshakes take the new ones.
type QUICOptions struct {
	// TLS serves the handshakes. It must have certificates (or
	// GetCertificate or GetConfigForClient); its NextProtos are replaced
	// by h3, and TLS 1.3 is the least version (QUIC has no other).
	TLS *tls.Config
	// EarlyData accepts 0-RTT: resumed clients may send requests in their
	// first flight, which are served by the rules of early data
	// (Session.Early). Off, 0-RTT is refused and every request waits for
	// the handshake.
	EarlyData bool
	// H3 bounds the connections: their streams and idle timeout.
	H3 h3.Settings
	// RetryAbove is the rate of new connection attempts per second above
	// which a client must prove its address with a Retry token first (RFC
	// 9000 §8.1.2): a round trip more for each, but a flood of handshakes
	// from spoofed addresses costs sluice no state and sends them nothing
	// larger than what they sent. 0 means 1000; a negative value sends
	// every new client a Retry.
	RetryAbove int
	// ConnectionIDs makes the connection IDs the socket's connections
	// hand out (quic-go's Transport.ConnectionIDGenerator), so that what
	// reads the socket can tell whose a datagram is (package quicshare).
	// nil: quic-go's, random. Read once, by ListenQUIC.
	ConnectionIDs quic.ConnectionIDGenerator
	// Mark, when set, is asked about the source address of each new
	// connection attempt first: one it reports true for is a mark that
	// what reads the socket put among its datagrams (package quicshare's
	// Conn.Mark), answered with a Retry and counted nowhere. Read once,
	// by ListenQUIC.
	Mark func(net.Addr) bool
}

// QUICSocket is an HTTP/3 listening socket: a UDP socket, quic-go's
// Transport on it, and one listener whose options can change while it
// serves (Set). Servers take its connections in turn (Handoff): a reload
// hands the socket from the old Server to the new one without closing it,
// and the connections the old one accepted stay on the same Transport
// until they finish. Its methods are safe for concurrent use.
type QUICSocket struct {
	pc   net.PacketConn
	tr   *quic.Transport
	base *tls.Config
	mu   sync.Mutex
	ln   *quic.EarlyListener // closed once Unlisten is called, until Set
	off  bool                // Unlisten was called
	opts QUICOptions
	tls  *tls.Config
	conf *quic.Config
	rate rateWindow
	hs   handshakes
	mark func(net.Addr) bool // QUICOptions.Mark
}

// handshakes counts the connections of a QUICSocket whose handshake is
// under way: begun (the Transport's ConnContext) and neither taken by an
// Accept nor ended.
type handshakes struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n is 0
}

// handshake is one of them; settle, when it is taken or ends, counts it
// out once.
type handshake struct {
	hs      *handshakes
	settled atomic.Bool
}

type handshakeKey struct{}

func (h *handshakes) begin() *handshake {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		h.idle = make(chan struct{})
	}
	h.n++
	return &handshake{hs: h}
}

func (x *handshake) settle() {
	if !x.settled.CompareAndSwap(false, true) {
		return
	}
	h := x.hs
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n--; h.n == 0 {
		close(h.idle)
	}
}

// idleChan returns a channel closed once no handshake is under way.
func (h *handshakes) idleChan() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return h.idle
}

// ListenQUIC starts HTTP/3's QUIC on pc, a UDP socket (a *net.UDPConn, so
// that quic-go can use GSO, GRO and ECN where the kernel has them). The
// socket stays pc's caller's: Close leaves it open.
func ListenQUIC(pc net.PacketConn, opts QUICOptions) (*QUICSocket, error) {
	q := &QUICSocket{pc: pc, mark: opts.Mark}
	if err := q.Set(opts); err != nil {
		return nil, err
	}
	q.tr = &quic.Transport{Conn: pc, VerifySourceAddress: q.verifySource, ConnectionIDGenerator: opts.ConnectionIDs,
		ConnContext: func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
			x := q.hs.begin()
			context.AfterFunc(ctx, x.settle) // the handshake failed, or the connection ended
			return context.WithValue(ctx, handshakeKey{}, x), nil
		}}
	q.base = &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{h3.ALPN},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			q.mu.Lock()
			cfg := q.tls
			q.mu.Unlock()
			// crypto/tls asks only the first config's GetConfigForClient:
			// the options' own (a switch's) is asked here.
			if cfg.GetConfigForClient != nil {
				c, err := cfg.GetConfigForClient(hello)
				if err != nil || c != nil {
					return c, err
				}
			}
			return cfg, nil
		},
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.listen(); err != nil {
		return nil, err
	}
	return q, nil
}

// listen starts taking new connections. q.mu is held.
func (q *QUICSocket) listen() error {
	conf := &quic.Config{
		GetConfigForClient: func(*quic.ClientInfo) (*quic.Config, error) {
			q.mu.Lock()
			defer q.mu.Unlock()
			return q.conf, nil
		},
	}
	ln, err := q.tr.ListenEarly(q.base, conf)
	if err != nil {
		return err
	}
	q.ln = ln
	return nil
}

// Set changes the options new handshakes take; on a socket that
// stopped listening (Unlisten), it listens again. opts.ConnectionIDs and
// opts.Mark are ListenQUIC's business, and ignored.
func (q *QUICSocket) Set(opts QUICOptions) error {
	if opts.TLS == nil || opts.TLS.GetCertificate == nil && opts.TLS.GetConfigForClient == nil && len(opts.TLS.Certificates) == 0 {
		return errors.New("proxy: HTTP/3 needs a TLS config with certificates")
	}
	cfg := opts.TLS.Clone()
	if orig := opts.TLS.GetConfigForClient; orig != nil {
		// A switch's (tlsterm): the config it hands out, made for QUIC.
		cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := orig(hello)
			if err != nil || c == nil {
				return c, err
			}
			c = c.Clone()
			c.NextProtos = []string{h3.ALPN}
			c.MinVersion = tls.VersionTLS13
			return c, nil
		}
	}
	cfg.NextProtos = []string{h3.ALPN}
	cfg.MinVersion = tls.VersionTLS13
	conf := h3.QUICConfig(&opts.H3, opts.EarlyData)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.opts, q.tls, q.conf = opts, cfg, conf
	if q.off {
		q.off = false
		return q.listen()
	}
	return nil
}

// Unlisten stops taking new connections: handshakes under way are
// refused (CONNECTION_REFUSED) and new ones dropped, while those whose
// handshake is done wait for an Accept, which returns them and then
// net.ErrClosed. The connections accepted stay on the socket.
func (q *QUICSocket) Unlisten() {
	q.mu.Lock()
	q.off = true
	ln := q.ln
	q.mu.Unlock()
	ln.Close()
}

// verifySource decides whether a new connection attempt must prove its
// address first (RetryAbove).
func (q *QUICSocket) verifySource(addr net.Addr) bool {
	if q.mark != nil && q.mark(addr) {
		return true
	}
	q.mu.Lock()
	limit := q.opts.RetryAbove
	q.mu.Unlock()
	switch {
	case limit < 0:
		return true
	case limit == 0:
		limit = 1000
	}
	return q.rate.add(time.Now()) > limit
}

// UnlistenIdle is Unlisten once no handshake is under way (or ctx is
// done), for a socket whose new connection attempts go elsewhere (to the
// new process of an upgrade, see package quicshare): the handshakes begun
// here complete, and are taken, instead of being refused.
func (q *QUICSocket) UnlistenIdle(ctx context.Context) {
	select {
	case <-q.hs.idleChan():
	case <-ctx.Done():
	}
	q.Unlisten()
}

// Accept returns the next connection, early (its handshake may still be
// under way, for 0-RTT); net.ErrClosed once the socket stopped listening
// and no connection waits.
func (q *QUICSocket) Accept(ctx context.Context) (*quic.Conn, error) {
	q.mu.Lock()
	ln := q.ln
	q.mu.Unlock()
	c, err := ln.Accept(ctx)
	if errors.Is(err, quic.ErrServerClosed) {
		return nil, net.ErrClosed
	}
	if err == nil {
		if x, ok := c.Context().Value(handshakeKey{}).(*handshake); ok {
			x.settle()
		}
	}
	return c, err
}

// Addr returns the socket's address.
func (q *QUICSocket) Addr() net.Addr { return q.pc.LocalAddr() }

// Close stops taking connections and ends those open at once (without
// CONNECTION_CLOSE: the Servers' Shutdown sends GOAWAY first and closes
// them as they finish). The UDP socket stays open.
func (q *QUICSocket) Close() error {
	q.Unlisten()
	return q.tr.Close()
}

// Handoff returns a QUICListener on q for one Server: closing it ends that
// Server's Accept, not q, so that another Server can take q's next
// connections (a reload's).
func (q *QUICSocket) Handoff() QUICListener {
	ctx, cancel := context.WithCancel(context.Background())
	return &quicHandoff{q: q, ctx: ctx, cancel: cancel}
}

type quicHandoff struct {
	q      *QUICSocket
	ctx    context.Context
	cancel context.CancelFunc
}

func (h *quicHandoff) Accept(ctx context.Context) (*quic.Conn, error) {
	c, err := h.q.Accept(h.ctx)
	if err != nil && h.ctx.Err() != nil {
		return nil, net.ErrClosed
	}
	return c, err
}

func (h *quicHandoff) Close() error   { h.cancel(); return nil }
func (h *quicHandoff) Addr() net.Addr { return h.q.Addr() }

// rateWindow counts events in the current and the last second, for a
// rate that does not jump at the second's turn.
type rateWindow struct {
	mu        sync.Mutex
	sec       int64
	cur, last int
}

// add counts an event at now and returns the rate: the events of the
// last second, by the current second's count and a share of the last's.
func (w *rateWindow) add(now time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := now.Unix()
	switch {
	case s == w.sec:
	case s == w.sec+1:
		w.sec, w.last, w.cur = s, w.cur, 0
	default:
		w.sec, w.last, w.cur = s, 0, 0
	}
	w.cur++
	frac := float64(now.Nanosecond()) / 1e9
	return w.cur + int(float64(w.last)*(1-frac))
}

// AltSvcH3 returns the Alt-Svc field value that advertises HTTP/3 on port
// (RFC 9114 §3.1.1): h3=":443"; ma=86400.
func AltSvcH3(port int) string {
	return `h3=":` + strconv.Itoa(port) + `"; ma=86400`
}
