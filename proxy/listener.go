package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"slices"
)

// ListenerOptions say how a Server serves the connections of one listener
// (ServeWith). The zero value serves plain HTTP/1.1 with the Server's
// Handler, as Serve does.
type ListenerOptions struct {
	// TLS, when set, terminates TLS on every connection (see ServeTLS).
	TLS *tls.Config
	// Handler, when set, serves the listener's requests instead of the
	// Server's Handler; SetHandler does not change it. A RedirectHTTPS
	// on a plain listener, say.
	Handler Handler
	// Filter, when set, sees each request of the listener before the
	// Handler does (before its RequestFilter too), whichever Handler
	// serves: a Response it returns answers the request, nil passes the
	// request on. An ACME manager's HTTP-01 challenges answered on port
	// 80, in front of a RedirectHTTPS or the routes, say.
	Filter RequestFilter
	// Protocols are the protocols served. On a TLS listener they are the
	// ALPN preference, most preferred first, "h2" and "http/1.1"; nil is
	// the config's NextProtos, or Protocols(). On a plain listener, "h2c"
	// serves HTTP/2 to a client that opens with its preface (prior
	// knowledge); HTTP/1.1 is always served there.
	Protocols []string
	// AltSvc, when set, is the Alt-Svc field every answer on the
	// listener carries (RFC 7838): h3=":443"; ma=86400 on a TCP listener
	// whose address also serves HTTP/3 (ServeQUIC), so that clients move
	// to it. AltSvcH3 makes it.
	AltSvc string
}

// listener is what a connection knows of the listener it came from.
type listener struct {
	// tls is the clone of ListenerOptions.TLS that serves, whose
	// GetConfigForClient learns why a handshake is refused (tls.go); nil
	// for a plain listener.
	tls    *tls.Config
	hooks  *hooks        // the listener's own Handler's; nil: the Server's
	filter RequestFilter // ListenerOptions.Filter
	// h2c is set when a plain connection that opens with the HTTP/2
	// preface is served as HTTP/2.
	h2c bool
	// addr is the address the listener is bound to, for
	// Server.Connections.
	addr string
	// altSvc is ListenerOptions.AltSvc.
	altSvc string
	// shed is what a client turned away at accept is sent (accept.go):
	// a 503 on a plain listener, nothing on a TLS one, whose client
	// waits for a handshake.
	shed []byte
}

// Protocols returns the application protocols a Server speaks over TLS,
// for ALPN, most preferred first: "h2", "http/1.1". A TLS config for ServeTLS
// should offer these (tlsterm.Settings.NextProtos); a connection whose
// handshake settles on another protocol is closed, but for acme-tls/1: see
// ServeWith. (A client that offers ALPN without any of them is refused by
// crypto/tls itself.)
func Protocols() []string { return []string{"h2", "http/1.1"} }

// acmeTLS1 is the ALPN protocol of an ACME CA validating a TLS-ALPN-01
// challenge (RFC 8737 §6.2).
const acmeTLS1 = "acme-tls/1"

// ServeTLS is ServeWith with a TLS config: it accepts connections on ln
// (a TCP listener, such as Listen's) and serves HTTP/1.1 over TLS on them.
// See ListenerOptions and ServeWith.
func (srv *Server) ServeTLS(ln net.Listener, config *tls.Config) error {
	return srv.ServeWith(ln, ListenerOptions{TLS: config})
}

// ServeWith is Serve for a listener with options of its own.
//
// With opts.TLS, each connection's handshake must complete within the
// HeaderTimeout counted from accept; a client that sends a plain HTTP
// request instead is answered 400 in plain HTTP, and every failed
// handshake is counted (TLSObserver) and logged at debug level only. The
// Server serves with a clone of opts.TLS made here (whose
// GetConfigForClient wraps the original's, to tell why a handshake was
// refused): set the config's fields before, and change what handshakes
// use through its GetConfigForClient or GetCertificate
// (tlsterm.Switch does). The clone's automatic session ticket keys live as
// long as this call. A config without NextProtos offers Protocols. Requests on TLS connections carry X-Forwarded-Proto:
// https, and their Session's TLS is set.
//
// A config that offers acme-tls/1 has the certificates of its listener
// validated by an ACME CA (TLS-ALPN-01, RFC 8737): a handshake that
// settles on it was the CA's, whose answer was the certificate its
// GetCertificate gave; the connection is closed once the handshake is
// done, as the RFC has the CA do, and the handshake counted as any other.
func (srv *Server) ServeWith(ln net.Listener, opts ListenerOptions) error {
	srv.init()
	l := &listener{shed: shedAnswer, filter: opts.Filter, h2c: opts.TLS == nil && slices.Contains(opts.Protocols, "h2c"),
		altSvc: opts.AltSvc}
	if opts.Handler != nil {
		l.hooks = newHooks(opts.Handler)
	}
	if opts.TLS != nil {
		if opts.TLS.GetCertificate == nil && opts.TLS.GetConfigForClient == nil && len(opts.TLS.Certificates) == 0 {
			ln.Close()
			return errors.New("proxy: TLS config without certificates")
		}
		l.tls = opts.TLS.Clone()
		l.tls.GetConfigForClient = l.configFor(opts.TLS.GetConfigForClient)
		switch {
		case len(opts.Protocols) > 0:
			l.tls.NextProtos = alpn(opts.Protocols, l.tls.NextProtos)
		case len(l.tls.NextProtos) == 0:
			l.tls.NextProtos = Protocols()
		}
		l.shed = nil
	}
	return srv.serve(ln, l)
}

// alpn returns the ALPN list of a TLS listener serving protocols: them,
// and acme-tls/1 when the config offered it (an ACME manager's).
func alpn(protocols, offered []string) []string {
	list := slices.Clone(protocols)
	if slices.Contains(offered, acmeTLS1) {
		list = append(list, acmeTLS1)
	}
	return list
}

// speaks reports whether the Server speaks proto, the protocol a TLS
// handshake settled on ("" when the client offered none: HTTP/1.1).
func speaks(proto string) bool {
	return proto == "" || slices.Contains(Protocols(), proto)
}
