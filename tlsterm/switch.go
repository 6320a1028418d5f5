package tlsterm

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync/atomic"
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
	NextProtos []string
}

// config makes the tls.Config of s.
func (s *Settings) config() (*tls.Config, error) {
	if s.Certificates == nil {
		return nil, errors.New("tlsterm: no certificates")
	}
	if s.ClientAuth != tls.NoClientCert && s.ClientCAs == nil {
		return nil, errors.New("tlsterm: client certificates asked for without CAs to check them against")
	}
	return &tls.Config{
		GetCertificate: s.Certificates.GetCertificate,
		MinVersion:     max(s.MinVersion, tls.VersionTLS12),
		ClientAuth:     s.ClientAuth,
		ClientCAs:      s.ClientCAs,
		NextProtos:     s.NextProtos,
	}, nil
}

// Switch is a TLS listener's configuration, whose Settings can be replaced
// while it serves. Config returns the tls.Config to serve with, made once;
// through its GetConfigForClient every handshake uses the Settings last
// Set. Connections already open keep what their handshake chose.
//
// Session ticket keys belong to the tls.Config that serves (Config's, or a
// clone of it made to serve with), not to the Settings: they are
// crypto/tls's own, random at start, a new one every 24 hours, each
// accepted for 7 days, and Set leaves them alone, so that a client resumes
// its session across a reload. (A resumed session skips the certificate: a
// client keeps the one it was given until it makes a full handshake. Its
// own certificate, when client_auth asks for one, is checked again against
// the CAs in force.) A restart makes new keys: each client then makes one
// full handshake.
type Switch struct {
	parent *tls.Config
	cur    atomic.Pointer[tls.Config]
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
	c, err := s.config()
	if err != nil {
		return err
	}
	sw.cur.Store(c)
	return nil
}

func (sw *Switch) configFor(*tls.ClientHelloInfo) (*tls.Config, error) {
	return sw.cur.Load(), nil
}
