package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/internal/clock"
	"github.com/sluice-proxy/sluice/internal/sock"
)

// TLSObserver is an Observer that is also told of every TLS handshake on
// the Server's TLS listeners: each completed one, with its state, and each
// failed one, with the reason. It is called from the connection's
// goroutine and must not block.
type TLSObserver interface {
	Handshake(state *tls.ConnectionState)
	HandshakeFailed(reason HandshakeFailure, err error)
}

// HandshakeFailure says why a TLS handshake failed.
type HandshakeFailure uint8

const (
	// FailedOther is any other failure: a malformed handshake, no
	// cipher suite or curve in common, a client without the certificate
	// a listener requires (the debug line says which).
	FailedOther HandshakeFailure = iota
	// FailedTimeout: not completed within the header timeout.
	FailedTimeout
	// FailedClosed: the client closed or reset the connection first.
	FailedClosed
	// FailedPlainHTTP: the client sent a plain HTTP request, answered
	// 400 in plain HTTP.
	FailedPlainHTTP
	// FailedNotTLS: the client sent something neither TLS nor HTTP; it
	// is closed.
	FailedNotTLS
	// FailedVersion: the client offered only TLS versions older than the
	// listener's oldest.
	FailedVersion
	// FailedALPN: the client offered ALPN protocols, none of which the
	// listener speaks (a client that offers only h2 to a listener of
	// http/1.1).
	FailedALPN
	// FailedClientCert: the client's certificate did not verify against
	// the listener's CAs.
	FailedClientCert
	// FailedClientAlert: the client ended the handshake with an alert,
	// most often because it did not accept sluice's certificate.
	FailedClientAlert
)

var handshakeFailures = [...]string{
	FailedOther:       "other",
	FailedTimeout:     "timeout",
	FailedClosed:      "closed",
	FailedPlainHTTP:   "plain_http",
	FailedNotTLS:      "not_tls",
	FailedVersion:     "version",
	FailedALPN:        "alpn",
	FailedClientCert:  "client_cert",
	FailedClientAlert: "client_alert",
}

// HandshakeFailures lists every HandshakeFailure, for metrics made ahead.
func HandshakeFailures() []HandshakeFailure {
	all := make([]HandshakeFailure, len(handshakeFailures))
	for i := range all {
		all[i] = HandshakeFailure(i)
	}
	return all
}

func (f HandshakeFailure) String() string {
	if int(f) < len(handshakeFailures) {
		return handshakeFailures[f]
	}
	return "other"
}

// TLSVersion names a TLS version as the access log and metrics write it:
// "1.2", "1.3".
func TLSVersion(v uint16) string {
	switch v {
	case tls.VersionTLS13:
		return "1.3"
	case tls.VersionTLS12:
		return "1.2"
	case tls.VersionTLS11:
		return "1.1"
	case tls.VersionTLS10:
		return "1.0"
	}
	return "0x" + strconv.FormatUint(uint64(v), 16)
}

// helloKey carries the connection to configFor through the handshake's
// context.
type helloKey struct{}

// configFor returns the GetConfigForClient of the config a TLS listener
// serves with: it asks the original config's own, if any, for the config
// of the handshake (or takes the listener's), and notes on the connection
// the name the client asked for and whether the handshake is bound to
// fail for its version or its ALPN protocols, for the count and the debug
// line of a failure, which crypto/tls's errors do not tell apart.
func (l *listener) configFor(orig func(*tls.ClientHelloInfo) (*tls.Config, error)) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	return func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		cfg := l.tls
		if orig != nil {
			c, err := orig(hello)
			if err != nil {
				return nil, err
			}
			if c != nil {
				cfg = c
			}
		}
		if c, ok := hello.Context().Value(helloKey{}).(*conn); ok {
			c.sni = hello.ServerName
			c.refusal = refusal(hello, cfg)
		}
		return cfg, nil
	}
}

// refusal tells whether crypto/tls is bound to refuse hello under cfg for
// its TLS versions or its ALPN protocols (FailedOther when neither).
func refusal(hello *tls.ClientHelloInfo, cfg *tls.Config) HandshakeFailure {
	oldest := max(cfg.MinVersion, tls.VersionTLS12)
	newest := uint16(0)
	for _, v := range hello.SupportedVersions {
		newest = max(newest, v)
	}
	if newest < oldest {
		return FailedVersion
	}
	if len(hello.SupportedProtos) == 0 || len(cfg.NextProtos) == 0 {
		return FailedOther
	}
	for _, theirs := range hello.SupportedProtos {
		for _, ours := range cfg.NextProtos {
			// crypto/tls lets an http/1.1 client through to an h2
			// server as if it offered no ALPN.
			if theirs == ours || theirs == "http/1.1" && ours == "h2" {
				return FailedOther
			}
		}
	}
	return FailedALPN
}

// handshake completes the TLS handshake of a new connection, within the
// header timeout counted from accept, and reports whether the connection
// goes on to its requests. A failed handshake is counted and logged at
// debug level (never above: a port open to the internet sees scanners all
// day), and a plain HTTP request is answered 400.
func (c *conn) handshake() bool {
	srv := c.srv
	if c.helloBy.IsZero() {
		c.helloBy = clock.Now().Add(srv.headerTimeout())
	}
	if c.tls == nil {
		// crypto/tls reads and writes through a sock.Conn, whose system
		// calls the scheduler does not see.
		under := sock.Wrap(c.raw)
		if c.early != nil {
			under = newHelloConn(under, c.early, c.earlyp)
			c.early, c.earlyp = nil, nil
		}
		c.tls = tls.Server(under, c.ln.tls)
		c.nc = c.tls
		c.r.Reset(c.nc)
	}
	// Marked idle, so that Shutdown cuts the handshake short: no request
	// has begun.
	c.nc.SetWriteDeadline(c.helloBy)
	if !c.idleUntil(c.helloBy) {
		return false
	}
	ctx := context.Background()
	if c.ln != nil && c.ln.tls != nil {
		ctx = context.WithValue(ctx, helloKey{}, c)
	}
	err := c.tls.HandshakeContext(ctx)
	c.setIdle(false)
	var st tls.ConnectionState
	if err == nil {
		st = c.tls.ConnectionState()
		if st.NegotiatedProtocol == acmeTLS1 {
			c.validated(&st)
			return false
		}
		if !speaks(st.NegotiatedProtocol) {
			// Only a config that offers what the Server does not speak
			// gets here.
			err, c.refusal = errors.New("proxy: negotiated ALPN protocol "+strconv.Quote(st.NegotiatedProtocol)+", which this server does not speak"), FailedALPN
		}
	}
	if err != nil {
		if !srv.Draining() {
			c.handshakeFailed(err) // else Shutdown cut it
		}
		return false
	}
	c.sni, c.refusal = "", 0
	c.state = &st
	if o, ok := srv.Observer.(TLSObserver); ok {
		o.Handshake(c.state)
	}
	return true
}

// validated ends a handshake that settled on acme-tls/1: an ACME CA
// validating a TLS-ALPN-01 challenge, whose answer was the certificate it
// got (RFC 8737 §3: nothing follows the handshake, and the CA closes the
// connection). It is counted as a handshake and logged at debug level.
func (c *conn) validated(st *tls.ConnectionState) {
	srv := c.srv
	if o, ok := srv.Observer.(TLSObserver); ok {
		o.Handshake(st)
	}
	if l := srv.ErrorLog; l.Enabled(context.Background(), slog.LevelDebug) {
		l.LogAttrs(context.Background(), slog.LevelDebug, "ACME TLS-ALPN-01 validation handshake",
			slog.String("client", c.client), slog.String("sni", st.ServerName))
	}
}

// handshakeFailed counts and logs a failed handshake, and answers a plain
// HTTP request.
func (c *conn) handshakeFailed(err error) {
	why := c.refusal
	if why == FailedOther {
		why = handshakeFailure(err)
	}
	if why == FailedPlainHTTP {
		c.raw.SetWriteDeadline(time.Now().Add(time.Second))
		if _, werr := c.raw.Write(plainHTTPAnswer); werr == nil {
			// The request was not read: the close lingers, so that it
			// does not turn into a reset that destroys the answer.
			c.linger = true
		}
	}
	srv := c.srv
	if o, ok := srv.Observer.(TLSObserver); ok {
		o.HandshakeFailed(why, err)
	}
	if l := srv.ErrorLog; l.Enabled(context.Background(), slog.LevelDebug) {
		l.LogAttrs(context.Background(), slog.LevelDebug, "TLS handshake failed",
			slog.String("client", c.client), slog.String("reason", why.String()),
			slog.String("sni", c.sni), slog.String("error", err.Error()))
	}
}

// handshakeFailure classifies a failed handshake's error.
func handshakeFailure(err error) HandshakeFailure {
	var rhe tls.RecordHeaderError
	var cve *tls.CertificateVerificationError
	var oe *net.OpError
	switch {
	case isTimeout(err):
		return FailedTimeout
	case errors.As(err, &rhe):
		if rhe.Conn != nil && looksLikeHTTP(rhe.RecordHeader[:]) {
			return FailedPlainHTTP
		}
		return FailedNotTLS
	case errors.As(err, &cve):
		return FailedClientCert
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return FailedClosed
	case errors.As(err, &oe) && oe.Op == "remote error":
		// An alert the client sent (crypto/tls reports them so).
		return FailedClientAlert
	}
	return FailedOther
}

// looksLikeHTTP reports whether the first five bytes a client sent on a TLS
// port start a plain HTTP/1.x request line: a method in capitals, then a
// space, or a method of five letters or more ("GET /", "POST ", "OPTIO").
func looksLikeHTTP(b []byte) bool {
	for i, ch := range b {
		switch {
		case 'A' <= ch && ch <= 'Z':
		case ch == ' ' && i >= 3:
			return true
		default:
			return false
		}
	}
	return true
}

// plainHTTPAnswer is what a plain HTTP request on a TLS port gets, as
// nginx answers it: a 400 that says so, in plain HTTP, and the connection
// closes.
var plainHTTPAnswer = func() []byte {
	body := "400 Bad Request: a plain HTTP request was sent to an HTTPS port; use https://\n"
	return []byte("HTTP/1.1 400 Bad Request\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"Cache-Control: no-store\r\n" +
		`Proxy-Status: sluice; error=http_request_error; details="plain HTTP on a TLS port"` + "\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Connection: close\r\n\r\n" + body)
}()

// helloConn is the socket under a TLS connection whose first bytes were
// read before its handshake began (conn.awaitHello): a read takes those
// first, then the socket's. Only crypto/tls reads it, one read at a time.
//
// A ClientHello that came whole in its first record is handed over in
// smaller records of the same type and version (RFC 8446 §5.1 lets a
// handshake message be fragmented across records as the sender likes, and
// the transcript is of the messages, not of their records), each within
// the buffer crypto/tls reads into. crypto/tls keeps the two buffers it
// reads a handshake into for the connection's life: its record buffer,
// grown to the largest record it read, and its handshake buffer, grown to
// the largest message. A post-quantum key share (X25519MLKEM768, Go's and
// browsers' default) makes the ClientHello about 1.5–2 KB, in one record,
// and so both buffers; in records that fit its first read's buffer the
// record buffer stays at that (576 bytes), and the handshake buffer grows
// by doubling from the first record's size to a little past the message's
// (see helloFragment). An idle connection keeps about 1.4 KB less. Records
// after the first, and a first record that did not come whole or is not a
// handshake record, are handed over as they came.
type helloConn struct {
	net.Conn
	// early holds the bytes read before the handshake, until they are
	// handed over; then nil, and the connection's life long helloConn is
	// the socket and a pointer.
	early *earlyBytes
}

// earlyBytes are the bytes of a connection read before its handshake and
// not yet handed over to crypto/tls (helloConn).
type earlyBytes struct {
	b    []byte  // from the first record's start
	bp   *[]byte // the pooled buffer b is in, if it is
	at   int     // where the bytes of b not yet handed over begin, after next
	next []byte  // the record (or its rest) the next read takes, in b
	// Of the first record while it is handed over in fragments: its
	// type and version, its payload bytes framed so far, and those left.
	hdr        [3]byte
	sent, left int
}

// newHelloConn is a helloConn over nc that hands over early first, from
// its pooled buffer earlyp (nil when it is not one).
func newHelloConn(nc net.Conn, early []byte, earlyp *[]byte) *helloConn {
	e := &earlyBytes{b: early, bp: earlyp}
	if n := helloPayload(early); n > 0 {
		copy(e.hdr[:], early[:3])
		e.at, e.left = tlsRecordHeader, n
	}
	return &helloConn{Conn: nc, early: e}
}

// tlsRecordHeader is the length of a TLS record's header: its content
// type, legacy version and payload length (RFC 8446 §5.1).
const tlsRecordHeader = 5

// tlsHandshakeRecord is the content type of a TLS handshake record (RFC
// 8446 §5.1), which a ClientHello comes in.
const tlsHandshakeRecord = 0x16

// helloPayload returns the length of the payload of the handshake record
// b begins with, when b holds it whole and it is not empty; 0 otherwise.
func helloPayload(b []byte) int {
	if len(b) < tlsRecordHeader || b[0] != tlsHandshakeRecord {
		return 0
	}
	n := int(b[3])<<8 | int(b[4])
	if len(b) < tlsRecordHeader+n {
		return 0
	}
	return n
}

func (h *helloConn) Read(p []byte) (int, error) {
	e := h.early
	if e == nil {
		return h.Conn.Read(p)
	}
	if len(e.next) == 0 {
		switch {
		case e.left > 0:
			// The fragment's header goes in the 5 bytes before its
			// payload, handed over already (the record's own header,
			// or the last fragment's payload).
			k := helloFragment(e.sent, e.left, len(p)-tlsRecordHeader)
			start := e.at - tlsRecordHeader
			copy(e.b[start:], e.hdr[:])
			e.b[start+3], e.b[start+4] = byte(k>>8), byte(k)
			e.next = e.b[start : e.at+k]
			e.at += k
			e.sent += k
			e.left -= k
		case e.at < len(e.b):
			e.next, e.at = e.b[e.at:], len(e.b)
		default:
			h.release()
			return h.Conn.Read(p)
		}
	}
	n := copy(p, e.next)
	e.next = e.next[n:]
	if len(e.next) == 0 && e.left == 0 && e.at == len(e.b) {
		h.release()
	}
	return n, nil
}

// release lets go of the bytes read before the handshake, all handed over.
func (h *helloConn) release() {
	if bp := h.early.bp; bp != nil {
		putBuf(bp)
	}
	h.early = nil
}

// minHelloFragment is the least payload a fragment of the first record
// carries when the reader's buffer is smaller than that.
const minHelloFragment = 256

// helloFragment returns the payload length of the next record the first
// record's payload is handed over in, sent bytes of it framed already and
// left to go, for a read into a buffer with room for that much payload
// after the header. Each fits room (or minHelloFragment), so that
// crypto/tls's record buffer need not grow; the first is the payload
// halved until it fits, and each later one at most what was sent before
// it, so that the handshake buffer, which a bytes.Buffer grows to twice
// its size when a write does not fit, doubles from the first record's
// size to a little past the whole: a 1,500-byte ClientHello goes in
// records of 375, 375, 571 and 179 bytes, its handshake buffer 384, 768,
// then 1,536 bytes (in records of 571 it would end at 2,304).
func helloFragment(sent, left, room int) int {
	room = max(room, minHelloFragment)
	if sent == 0 {
		k := left
		for k > room {
			k = (k + 1) / 2
		}
		return k
	}
	return min(left, room, sent)
}
