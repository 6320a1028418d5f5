package tlsterm

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Settings are what a TLS listener's handshakes use. A reload replaces
// them whole (Switch.Set).
type Settings struct {
	// Certificates gives the certificate for each handshake; required.
	Certificates Source
	// MinVersion is the oldest TLS version accepted: tls.VersionTLS12
	// (0 means that) or tls.VersionTLS13. A client that offers only older
	// versions is refused with a protocol_version alert.
	MinVersion uint16
	// ClientAuth asks clients for certificates: tls.NoClientCert (the
	// zero value), tls.VerifyClientCertIfGiven or
	// tls.RequireAndVerifyClientCert, checked against ClientCAs.
	ClientAuth tls.ClientAuthType
	ClientCAs  *x509.CertPool
	// NextProtos are the ALPN protocols offered, most preferred first:
	// those the server speaks (proxy.Protocols). A client that offers
	// ALPN without any of them is refused (no_application_protocol).
	// With ACMETLS1 among them, an ACME CA's TLS-ALPN-01 validation
	// (ChallengeHello) is served apart: see Switch.
	NextProtos []string
}

// ACMETLS1 is the ALPN protocol of an ACME CA validating a TLS-ALPN-01
// challenge (RFC 8737 §6.2): the handshake is the answer (the certificate
// the challenge asks for), and the CA closes the connection once it is
// done.
const ACMETLS1 = "acme-tls/1"

// ChallengeHello reports whether hello is an ACME CA's TLS-ALPN-01
// validation: it names the domain being validated and offers acme-tls/1
// alone (RFC 8737 §3).
func ChallengeHello(hello *tls.ClientHelloInfo) bool {
	return hello.ServerName != "" && len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == ACMETLS1
}

// configs are the tls.Configs of one Settings: for clients, and for ACME
// CAs validating a TLS-ALPN-01 challenge (nil without ACMETLS1 in
// NextProtos).
type configs struct {
	clients, challenge *tls.Config
	keys               atomic.Uint64 // the generation of clients' ticket keys (Switch.useTickets)
}

// configs makes the tls.Configs of s.
func (s *Settings) configs() (*configs, error) {
	if s.Certificates == nil {
		return nil, errors.New("tlsterm: no certificates")
	}
	if s.ClientAuth != tls.NoClientCert && s.ClientCAs == nil {
		return nil, errors.New("tlsterm: client certificates asked for without CAs to check them against")
	}
	cs := &configs{clients: &tls.Config{
		GetCertificate: s.Certificates.GetCertificate,
		MinVersion:     max(s.MinVersion, tls.VersionTLS12),
		ClientAuth:     s.ClientAuth,
		ClientCAs:      s.ClientCAs,
		NextProtos:     s.NextProtos,
	}}
	if slices.Contains(s.NextProtos, ACMETLS1) {
		// A CA presents no client certificate, and needs acme-tls/1
		// chosen whatever else the listener speaks.
		cs.challenge = &tls.Config{
			GetCertificate: s.Certificates.GetCertificate,
			MinVersion:     cs.clients.MinVersion,
			NextProtos:     []string{ACMETLS1},
		}
	}
	return cs, nil
}

// Switch is a TLS listener's configuration, whose Settings can be replaced
// while it serves. Config returns the tls.Config to serve with, made once;
// through its GetConfigForClient every handshake uses the Settings last
// Set. Connections already open keep what their handshake chose.
//
// Session ticket keys belong to the Switch, not to the Settings nor to the
// tls.Config that serves (Config's, or a clone of it a server makes): they
// are random at start, a new one every 24 hours, each accepted for 7 days,
// as crypto/tls's own are, and Set leaves them alone, so that a client
// resumes its session across a reload, and across one that starts a new
// server on the listener, which takes the Switch over. (A resumed session
// skips the certificate: a client keeps the one it was given until it
// makes a full handshake. Its own certificate, when client_auth asks for
// one, is checked again against the CAs in force.) A restart makes new
// keys: each client then makes one full handshake.
//
// With ACMETLS1 among the Settings' NextProtos, a ChallengeHello is served
// with the Settings' certificates, acme-tls/1 and nothing else: no client
// certificate is asked for (a CA has none to give), so that a listener
// with ClientAuth can still have its certificates validated. The
// certificate Source answers it (an ACME manager's gives the challenge's
// certificate); the server closes such a connection once the handshake
// is done (proxy.Server does).
type Switch struct {
	parent  *tls.Config
	cur     atomic.Pointer[configs]
	tickets tickets
}

// Ticket keys are rotated as crypto/tls rotates its own.
const (
	ticketKeyRotation = 24 * time.Hour
	ticketKeyLifetime = 7 * 24 * time.Hour
)

// tickets are a Switch's session ticket keys, newest (the one that makes
// tickets) first.
type tickets struct {
	mu   sync.Mutex
	keys [][32]byte
	made []time.Time
	due  atomic.Int64  // when the newest key is to be replaced, Unix ns
	gen  atomic.Uint64 // counts the rotations: configs.keys says which they have
}

// current returns the keys, after a rotation if one is due (now), and
// their generation.
func (t *tickets) current(now time.Time) ([][32]byte, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.keys) > 0 && now.UnixNano() < t.due.Load() {
		return t.keys, t.gen.Load()
	}
	var k [32]byte
	rand.Read(k[:]) // never fails (crypto/rand)
	keys, made := [][32]byte{k}, []time.Time{now}
	for i, m := range t.made {
		if now.Sub(m) < ticketKeyLifetime {
			keys, made = append(keys, t.keys[i]), append(made, m)
		}
	}
	t.keys, t.made = keys, made
	t.due.Store(now.Add(ticketKeyRotation).UnixNano())
	return keys, t.gen.Add(1)
}

// useTickets gives c the Switch's ticket keys, rotated if due, unless it
// has them already.
func (sw *Switch) useTickets(c *configs, now time.Time) {
	if now.UnixNano() < sw.tickets.due.Load() && c.keys.Load() == sw.tickets.gen.Load() {
		return
	}
	keys, gen := sw.tickets.current(now)
	c.clients.SetSessionTicketKeys(keys)
	c.keys.Store(gen)
}

// NewSwitch returns a Switch serving s.
func NewSwitch(s Settings) (*Switch, error) {
	sw := &Switch{}
	if err := sw.Set(s); err != nil {
		return nil, err
	}
	sw.parent = &tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: sw.configFor,
	}
	return sw, nil
}

// Config returns the tls.Config to serve with.
func (sw *Switch) Config() *tls.Config { return sw.parent }

// Set makes the handshakes that begin from now on use s. It fails, and
// changes nothing, when s lacks certificates or names no CAs for the
// client certificates it asks for.
func (sw *Switch) Set(s Settings) error {
	c, err := s.configs()
	if err != nil {
		return err
	}
	sw.useTickets(c, time.Now())
	sw.cur.Store(c)
	return nil
}

func (sw *Switch) configFor(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	c := sw.cur.Load()
	sw.useTickets(c, time.Now())
	if c.challenge != nil && ChallengeHello(hello) {
		return c.challenge, nil
	}
	return c.clients, nil
}
