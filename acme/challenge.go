package acme

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"strings"

	"github.com/caddyserver/certmagic"
	mholtacme "github.com/mholt/acmez/v3/acme"

	"github.com/sluice-proxy/sluice/proxy"
)

// errNoChallenge refuses a handshake that looks like a TLS-ALPN-01
// validation of no challenge under way here: anyone can send one.
var errNoChallenge = errors.New("acme: acme-tls/1 handshake for no challenge under way")

// challengeCertificate answers an ACME CA's TLS-ALPN-01 validation (RFC
// 8737) of a challenge under way in this process with the challenge's
// certificate, which certmagic made when the challenge began. Without
// one, the handshake is refused before certmagic is asked, which would log
// an error for each: a client's acme-tls/1 handshake must not write to the
// error log.
func (m *Manager) challengeCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	chal, ok := certmagic.GetACMEChallenge(normalize(hello.ServerName))
	r := m.run.Load()
	if !ok || chal.Type != mholtacme.ChallengeTypeTLSALPN01 || r == nil {
		return nil, errNoChallenge
	}
	return r.magic.GetCertificate(hello)
}

// acmePath is where an ACME CA fetches an HTTP-01 challenge's answer (RFC
// 8555 §8.3).
var acmePath = []byte("/.well-known/acme-challenge/")

// HTTPChallenges is a proxy.RequestFilter that answers an ACME CA's
// HTTP-01 validation of a challenge that a Manager of this process has
// under way: GET /.well-known/acme-challenge/TOKEN for the challenge's
// domain (its Host), answered 200 with the key authorization (RFC 8555
// §8.3). Every other request passes on, those for other tokens too (to
// whatever else may answer them). It is a plain listener's
// proxy.ListenerOptions.Filter, where port 80 arrives, in front of a
// RedirectHTTPS or the routes. A request it does not answer costs a
// comparison of its path.
type HTTPChallenges struct{}

// RequestFilter implements proxy.RequestFilter.
func (HTTPChallenges) RequestFilter(s *proxy.Session) *proxy.Response {
	path := s.Request.Path()
	if !bytes.HasPrefix(path, acmePath) || s.Request.Method() != "GET" {
		return nil
	}
	host := hostOnly(string(s.Request.Header.Get("Host")))
	chal, ok := certmagic.GetACMEChallenge(normalize(host))
	if !ok || chal.Type != mholtacme.ChallengeTypeHTTP01 ||
		string(path) != chal.HTTP01ResourcePath() || !strings.EqualFold(normalize(host), chal.Identifier.Value) {
		return nil
	}
	resp := proxy.Text(200, chal.KeyAuthorization)
	resp.Header.Add("Cache-Control", "no-store")
	return resp
}

// hostOnly returns the host of a Host field without its port.
func hostOnly(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}
