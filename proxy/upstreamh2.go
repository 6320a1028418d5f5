package proxy

import (
	"net"
	"sync"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h2"
	"github.com/sluice-proxy/sluice/internal/clock"
	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/pool"
)

// The protocols sluice speaks to upstreams (PeerOptions.Protocol).
const (
	// ProtocolHTTP11 is HTTP/1.1, the default ("" means it too).
	ProtocolHTTP11 = "http/1.1"
	// ProtocolH2 is HTTP/2 over TLS: the handshake must settle on h2
	// (ALPN), or the connection fails as a connect failure would (nothing
	// was sent).
	ProtocolH2 = "h2"
	// ProtocolH2C is HTTP/2 in the clear, with prior knowledge.
	ProtocolH2C = "h2c"
	// ProtocolAuto is TLS offering h2 and http/1.1: the server chooses.
	ProtocolAuto = "auto"
)

// multiplexed reports whether connections of protocol p may carry
// streams of several requests at once.
func multiplexed(p string) bool { return p == ProtocolH2 || p == ProtocolH2C || p == ProtocolAuto }

// alpnFor returns the ALPN protocols a TLS connection to an upstream of
// protocol p offers.
func alpnFor(p string) []string {
	switch p {
	case ProtocolH2:
		return []string{"h2"}
	case ProtocolAuto:
		return []string{"h2", "http/1.1"}
	}
	return []string{"http/1.1"}
}

// muxSet holds the HTTP/2 connections to upstreams, by pool key: a try
// takes a stream on one that has room, and another connection is opened
// only when every open one is at its server's SETTINGS_MAX_CONCURRENT_STREAMS.
// Connections with no open stream are closed after the peer's pool
// idle_timeout, and beyond its max_idle (counted in connections): looked
// at by every try of their server, and by a sweep of every server's once a
// second while the set holds any.
type muxSet struct {
	mu      sync.Mutex
	conns   map[string][]*muxConn
	dialing map[string]chan struct{} // closed when the dial under way for a key ends
	shares  int                      // servers beyond the first that close it (ShareUpstreamConns)
	closed  bool
	sweeper *time.Timer // runs tick while conns holds any
}

type muxConn struct {
	cc     *h2.ClientConn
	nc     net.Conn // what it runs on, for its addresses
	limits *pool.Limits
}

// take returns a connection to key with room for a stream; or, when none
// has room, a channel to wait on while another try dials one (closed when
// that dial ends), or dial set when this try is to dial (and call dialed
// after). It closes on its way the connections that ended or idled past
// their limits.
func (m *muxSet) take(key string, now time.Time) (mc *muxConn, wait <-chan struct{}, dial bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mc = m.find(key, now); mc != nil {
		return mc, nil, false
	}
	if ch, ok := m.dialing[key]; ok {
		return nil, ch, false
	}
	if m.dialing == nil {
		m.dialing = make(map[string]chan struct{})
	}
	m.dialing[key] = make(chan struct{})
	return nil, nil, true
}

// dialed ends the dial under way for key.
func (m *muxSet) dialed(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch, ok := m.dialing[key]; ok {
		close(ch)
		delete(m.dialing, key)
	}
}

// find is take's search; m.mu is held.
func (m *muxSet) find(key string, now time.Time) *muxConn {
	list := m.conns[key]
	if len(list) == 0 {
		return nil
	}
	var found *muxConn
	idle := 0
	kept := list[:0]
	for _, c := range list {
		select {
		case <-c.cc.Done():
			continue
		default:
		}
		if since, ok := c.cc.IdleSince(); ok {
			idle++
			if l := c.limits; l != nil && (l.IdleTimeout > 0 && now.Sub(since) > l.IdleTimeout || idle > max(l.MaxIdle, 1)) {
				c.cc.Shutdown()
				continue
			}
		}
		kept = append(kept, c)
		if found == nil && c.cc.Available() > 0 {
			found = c
		}
	}
	clear(list[len(kept):])
	m.conns[key] = kept
	return found
}

// add makes c the newest connection to key; it reports false once the set
// is closed.
func (m *muxSet) add(key string, c *muxConn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	if m.conns == nil {
		m.conns = make(map[string][]*muxConn)
	}
	m.conns[key] = append(m.conns[key], c)
	if m.sweeper == nil {
		m.sweeper = time.AfterFunc(sweepEvery, m.tick)
	}
	return true
}

// sweepEvery is how often the idle connections of every server are looked
// at, so that those of a server no try asks for any more (a reload removed
// it, traffic moved, traffic stopped) close too.
const sweepEvery = time.Second

// tick sweeps every server's connections, and comes again while any are
// left.
func (m *muxSet) tick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	now := time.Now()
	for k := range m.conns {
		if m.find(k, now); len(m.conns[k]) == 0 {
			delete(m.conns, k)
		}
	}
	if len(m.conns) > 0 {
		m.sweeper.Reset(sweepEvery)
	} else {
		m.sweeper = nil
	}
}

// share counts one more server that will close m; false when m is closed
// already.
func (m *muxSet) share() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.shares++
	return true
}

// close shuts every connection down gracefully (GOAWAY, then close once
// its streams ended) and takes no more, once the last server sharing m
// closes it.
func (m *muxSet) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shares > 0 {
		m.shares--
		return
	}
	m.closed = true
	if m.sweeper != nil {
		m.sweeper.Stop()
	}
	for _, list := range m.conns {
		for _, c := range list {
			c.cc.Shutdown()
		}
	}
	m.conns = nil
}

// connectH2 readies a try on an HTTP/2 peer: a stream on a connection
// that has room, or a new connection (TCP, then TLS for h2 and auto). An
// auto peer whose server chose http/1.1 gets that connection as an
// HTTP/1.1 one.
func (s *Session) connectH2(peer *Peer, a *Attempt, proto string) bool {
	opts := peer.Options
	now := a.Start
	key := peer.PoolKey()
	limits := opts.limits()
	// One dial at a time per server: the tries that find every connection
	// full while a new one is on its way wait for it, rather than each
	// opening its own.
	for {
		mc, wait, dial := s.srv.mux.take(key, now)
		if mc != nil {
			s.useH2(mc, proto, opts)
			return true
		}
		if dial {
			break
		}
		select {
		case <-wait:
		case <-time.After(opts.connectTimeout()):
			a.Err = &fault.Error{Kind: fault.ConnectTimeout, Source: fault.Upstream,
				Context: "waiting for a new HTTP/2 connection to " + peer.Addr}
			return false
		case <-s.srv.expire.Done():
			a.Err = &fault.Error{Kind: fault.Drained, Source: fault.Internally, Context: "sluice is shutting down"}
			return false
		}
		now = clock.Now()
	}
	defer s.srv.mux.dialed(key)
	d := net.Dialer{Timeout: opts.connectTimeout(), KeepAlive: -1}
	nc, err := sock.Dial(s.srv.expire, &d, peer.Addr)
	if err != nil {
		a.Err = fault.FromIO(err, fault.PhaseConnect)
		a.Err.Context = "connecting to " + peer.Addr
		return false
	}
	conn := nc
	if proto != ProtocolH2C {
		t := opts.tlsOptions()
		if t == nil {
			nc.Close()
			a.Err = &fault.Error{Kind: fault.Internal, Source: fault.Internally,
				Context: "peer " + peer.Addr + ": protocol " + proto + " needs TLS (PeerOptions.TLS); h2c is HTTP/2 in the clear"}
			return false
		}
		st := peer.tlsState(t)
		pc := pool.NewTLSConn(nc, st.config, key, limits, now)
		if !s.handshake(pc, peer, st, a) {
			pc.Close()
			return false
		}
		switch got := pc.TLS().ConnectionState().NegotiatedProtocol; {
		case got == "h2":
			conn = pc.TLS()
		case proto == ProtocolAuto:
			s.useH1(pc, opts) // the server chose HTTP/1.1
			return true
		default:
			pc.Close()
			a.Err = &fault.Error{Kind: fault.TLSHandshake, Source: fault.Upstream,
				Context: "TLS handshake with " + peer.Addr + ": the server did not choose h2 (ALPN " + quoteProto(got) + ")"}
			return false
		}
	}
	mc := &muxConn{cc: h2.NewClientConn(conn, &s.srv.H2Upstream), nc: conn, limits: limits}
	if !s.srv.mux.add(key, mc) {
		mc.cc.Close()
		a.Err = &fault.Error{Kind: fault.Drained, Source: fault.Internally, Context: "sluice is shutting down"}
		return false
	}
	s.useH2(mc, proto, opts)
	return true
}

// useH2 makes a stream of mc, to be opened as the request is sent, the
// try's.
func (s *Session) useH2(mc *muxConn, proto string, opts *PeerOptions) {
	s.h2u.use(mc, proto != ProtocolH2C, s, opts, s.deadline)
	s.setUp(&s.h2u)
}

func quoteProto(p string) string {
	if p == "" {
		return "none"
	}
	return `"` + p + `"`
}
