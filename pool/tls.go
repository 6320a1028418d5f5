package pool

import (
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/internal/sock"
)

// NewTLSConn wraps raw, a freshly dialed TCP connection, in a TLS client
// connection configured by cfg, not yet handshaken: the caller runs the
// handshake (TLS().HandshakeContext) under a deadline of its own. key must
// tell apart connections made with different TLS settings (Conn.Key).
//
// Over TLS the pool's rules hold as over TCP. The watcher sees the peer's
// FIN or RST on the socket under the TLS connection. The check before use
// cannot judge a peek of the raw socket, since the bytes of an idle TLS
// connection may be a close_notify or a session ticket alike; it reads
// what the socket holds through the TLS connection without waiting
// instead (see alive), with as many system calls as the peek.
func NewTLSConn(raw net.Conn, cfg *tls.Config, key string, limits *Limits, now time.Time) *Conn {
	tr := &transport{Conn: sock.Wrap(raw)}
	tc := tls.Client(tr, cfg)
	pc := &Conn{Conn: tc, Key: key, Limits: limits, Created: now, tr: tr, tls: tc}
	pc.Reader.Reset(pc) // its deadlines go through pc (SetReadDeadline)
	pc.sys.init(raw)
	tr.sys = &pc.sys
	return pc
}

// TLS returns the connection's TLS layer, or nil for a plain TCP
// connection.
func (c *Conn) TLS() *tls.Conn { return c.tls }

// transport is the TCP connection under a pooled TLS connection: its
// tls.Conn reads and writes through it. Its reads wait as the TCP
// connection's do, except around the pool's own reads of an idle
// connection; its writes wait as well, except for the alert a Close sends.
type transport struct {
	net.Conn
	sys *sysConn
	// now makes reads take what the socket holds and never wait, ignoring
	// any deadline: set only by whoever holds the connection, around one
	// read of the tls.Conn (tlsAlive, Now).
	now bool
	// closing makes writes never wait: the close_notify a Close sends
	// goes out if the socket has room for it, and a peer that stopped
	// reading cannot hold Close up (crypto/tls waits up to 5 s for it).
	closing atomic.Bool
	one     [1]byte
}

func (t *transport) Read(p []byte) (int, error) {
	if t.now {
		return t.sys.readIdle(p)
	}
	return t.Conn.Read(p)
}

func (t *transport) Write(p []byte) (int, error) {
	if t.closing.Load() {
		return t.sys.writeIdle(p, t.Conn)
	}
	return t.Conn.Write(p)
}

// errWouldBlock is what a transport's read returns, while it must not wait,
// when the socket holds nothing. It is a temporary net.Error: crypto/tls
// keeps any other read error as the connection's for good, and returns
// this one as it is, its state intact.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "pool: nothing to read without waiting" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// tlsAlive is the check before use of an idle TLS connection: one read of
// the TLS connection that takes what its buffers and the socket hold and
// never waits. TLS records that are not application data are processed as
// crypto/tls processes them: a session ticket (TLS 1.3's NewSessionTicket,
// which a server may send at any time after the handshake) is stored in the
// session cache and a key update applied, and the connection stays usable;
// a close_notify or another alert, an end of stream or a reset, ends it. A
// byte of application data, which an idle HTTP/1.1 server never sends
// unasked, ends it as over TCP.
func (c *Conn) tlsAlive() bool {
	c.tr.now = true
	n, err := c.tls.Read(c.tr.one[:])
	c.tr.now = false
	return n == 0 && err == errWouldBlock
}

// tlsNow is Now's reader for a TLS connection: the plaintext of the
// records the TLS buffers and the socket hold, without waiting.
type tlsNow struct{ c *Conn }

func (r tlsNow) Read(p []byte) (int, error) {
	r.c.tr.now = true
	n, err := r.c.tls.Read(p)
	r.c.tr.now = false
	if err == errWouldBlock {
		err = ErrNothingYet
	}
	return n, err
}
