// Package tlsterm is the certificate side of sluice's TLS termination: the
// certificates a listener serves, chosen by the name a client asks for
// (SNI); reading them from PEM files, with errors that name the file and
// say what is wrong with it; and a listener's tls.Config whose settings a
// reload replaces while the listener, its open connections and its session
// ticket keys stay (Switch).
//
// A listener's certificates come from a Source, anything with the
// GetCertificate method of tls.Config: Certificates, loaded from files, or
// a certificate manager that obtains them (sluice's acme.Manager, with
// Certificates beside it or alone). A Switch lets an ACME CA's TLS-ALPN-01
// validation through (ACMETLS1).
package tlsterm

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
)

// Source gives the certificate for a handshake, as tls.Config's
// GetCertificate does. It is called for every full handshake, with or
// without SNI (hello.ServerName is then empty), from many goroutines at
// once; the certificate it returns must not be changed afterwards.
type Source interface {
	GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error)
}

// Certificates is a Source of fixed certificates, chosen by the name the
// client asks for: a certificate whose DNS names hold the name exactly
// wins, then one with a wildcard for it (*.example.com matches
// www.example.com, not example.com nor a.b.example.com: one label, RFC
// 6125 §6.4.3); among several for the same name, the first the client can
// use (by its signature algorithms: ECDSA and RSA certificates for the
// same names, say). A client that sends no name, or one no certificate
// holds, gets the first certificate, the default. Names are matched
// without regard to case, and a trailing dot is ignored. It is safe for
// concurrent use and never changes; a reload makes a new one.
type Certificates struct {
	list  []*tls.Certificate
	exact map[string][]*tls.Certificate
	wild  map[string][]*tls.Certificate // by the name after "*."
}

// NewCertificates indexes certs by their names, the first being the
// default. Each needs its Leaf parsed (LoadPair and tls.X509KeyPair set
// it); one without is parsed here.
func NewCertificates(certs ...*tls.Certificate) (*Certificates, error) {
	if len(certs) == 0 {
		return nil, errors.New("tlsterm: no certificates")
	}
	cs := &Certificates{exact: map[string][]*tls.Certificate{}, wild: map[string][]*tls.Certificate{}}
	for _, c := range certs {
		if c == nil || len(c.Certificate) == 0 {
			return nil, errors.New("tlsterm: a certificate without its chain")
		}
		if c.Leaf == nil {
			leaf, err := x509.ParseCertificate(c.Certificate[0])
			if err != nil {
				return nil, err
			}
			cp := *c
			cp.Leaf = leaf
			c = &cp
		}
		cs.list = append(cs.list, c)
		for _, name := range c.Leaf.DNSNames {
			name = strings.TrimSuffix(strings.ToLower(name), ".")
			if rest, ok := strings.CutPrefix(name, "*."); ok {
				cs.wild[rest] = append(cs.wild[rest], c)
			} else {
				cs.exact[name] = append(cs.exact[name], c)
			}
		}
	}
	return cs, nil
}

// List returns the certificates in the order given, the default first.
func (cs *Certificates) List() []*tls.Certificate { return cs.list }

// GetCertificate implements Source.
func (cs *Certificates) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c, _ := cs.Lookup(hello); c != nil {
		return c, nil
	}
	return cs.list[0], nil
}

// Lookup returns the certificate that holds the name hello asks for, as
// GetCertificate chooses it, and whether it names it exactly rather than
// with a wildcard; nil when hello names none, or no certificate holds its
// name (where GetCertificate gives the default). A Source that serves
// these beside certificates of its own ranks them with it.
func (cs *Certificates) Lookup(hello *tls.ClientHelloInfo) (c *tls.Certificate, exact bool) {
	name := hello.ServerName
	if name == "" {
		return nil, false
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if c := pick(hello, cs.exact[name]); c != nil {
		return c, true
	}
	if _, parent, ok := strings.Cut(name, "."); ok {
		if c := pick(hello, cs.wild[parent]); c != nil {
			return c, false
		}
	}
	return nil, false
}

// pick returns the first of certs the client can use, or the first of
// them when it can use none (the handshake then fails as it would have),
// or nil when there are none.
func pick(hello *tls.ClientHelloInfo, certs []*tls.Certificate) *tls.Certificate {
	switch len(certs) {
	case 0:
		return nil
	case 1:
		return certs[0]
	}
	for _, c := range certs {
		if hello.SupportsCertificate(c) == nil {
			return c
		}
	}
	return certs[0]
}
