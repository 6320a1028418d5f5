package proxy

import (
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/pool"
)

// TLS makes the connections to a group of peers TLS (PeerOptions.TLS). It
// is shared, not copied, by the options that point to it, and must not
// change once in use.
//
// Each peer gets its own copy of Config, made at its first try: its
// ServerName, when Config leaves it empty, is the peer's (Peer.ServerName,
// else the host of its Addr), sent as SNI (unless it is an IP address) and
// verified against the server's certificate; its ClientSessionCache, when
// Config has none, is the peer's own, so that a new connection to the
// server resumes a TLS session instead of paying for a full handshake (and
// never offers one server the session of another); its NextProtos is
// what PeerOptions.Protocol speaks (http/1.1; h2; or both, for auto). Everything else is
// Config's: RootCAs (nil: the system's roots), Certificates (the client
// certificate of mutual TLS), InsecureSkipVerify, versions and ciphers.
//
// The handshake runs within the peer's connect timeout, which bounds the
// TCP connect and the handshake together, as nginx's proxy_connect_timeout
// does. Its failures are connect failures (fault.TLSHandshake,
// fault.TLSAlert, fault.TLSCertificate), retried on another server as a
// refused connection is; a certificate that does not verify, or a
// handshake the server refuses, is not tried on the same server again
// (retry.Excludes).
type TLS struct {
	// Config is the client side of the handshake; nil is a zero
	// tls.Config: the system's roots, the peer's name.
	Config *tls.Config
	// ID names Config among the TLS settings in use with one pool. Pooled
	// connections are keyed by the peer's address, the server name and
	// ID, so that a connection verified under one set of settings (one
	// CA, one client certificate) is never handed to a peer of another.
	// Settings that differ must have different IDs; equal IDs for equal
	// settings let the peers of different options share connections, and
	// keep them across a reload. Empty: an ID of this TLS value's own.
	ID string

	idOnce sync.Once
	id     string
}

// tlsIDs numbers the TLS values that have no ID of their own.
var tlsIDs atomic.Uint64

func (t *TLS) key() string {
	if t.ID != "" {
		return t.ID
	}
	t.idOnce.Do(func() { t.id = "#" + strconv.FormatUint(tlsIDs.Add(1), 10) })
	return t.id
}

// peerTLS is how one peer's connections are made and pooled, worked out
// at its first try so that no try after it builds a key or a config.
type peerTLS struct {
	key    string // the pool key: address, server name, settings
	config *tls.Config
}

// tlsState returns the peer's TLS state under t, building it at the
// first call.
func (p *Peer) tlsState(t *TLS) *peerTLS {
	if st := p.tls.Load(); st != nil {
		return st
	}
	var cfg *tls.Config
	if t.Config != nil {
		cfg = t.Config.Clone()
	} else {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = p.ServerName
		if _, unix := sock.UnixPath(p.Addr); cfg.ServerName == "" && !unix {
			cfg.ServerName = p.Addr
			if host, _, err := net.SplitHostPort(p.Addr); err == nil {
				cfg.ServerName = host
			}
		}
	}
	if cfg.ClientSessionCache == nil {
		// One server, one name: its latest session is all a peer needs.
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	}
	proto := p.Options.protocol()
	cfg.NextProtos = alpnFor(proto)
	key := p.Addr + "|" + cfg.ServerName + "|" + t.key()
	if proto != ProtocolHTTP11 {
		key += "|" + proto
	}
	st := &peerTLS{key: key, config: cfg}
	if !p.tls.CompareAndSwap(nil, st) {
		return p.tls.Load()
	}
	return st
}

// PoolKey returns the key of the peer's connections in the pool: its
// address for plain TCP; over TLS, the address, the server name and the
// TLS settings' ID.
func (p *Peer) PoolKey() string {
	if t := p.Options.tlsOptions(); t != nil {
		return p.tlsState(t).key
	}
	return p.Addr
}

func (o *PeerOptions) tlsOptions() *TLS {
	if o == nil {
		return nil
	}
	return o.TLS
}

// handshake runs the TLS handshake of pc, a new connection to peer made
// under st, within the connect timeout counted from the try's start. It
// reports a failure in a.Err.
func (s *Session) handshake(pc *pool.Conn, peer *Peer, st *peerTLS, a *Attempt) bool {
	pc.SetDeadline(a.Start.Add(peer.Options.connectTimeout()))
	if err := pc.TLS().HandshakeContext(s.srv.expire); err != nil {
		a.Err = fault.FromIO(err, fault.PhaseHandshake)
		a.Err.Context = "TLS handshake with " + peer.Addr + " as " + st.config.ServerName
		return false
	}
	pc.SetDeadline(time.Time{})
	return true
}
