// Package access is a route phase that allows or denies requests by the
// client's IP address.
package access

import (
	"net/netip"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/proxy"
)

// List allows or denies a client by its address. Deny wins over Allow: an
// address in a Deny prefix is denied whatever Allow says. When Allow is
// empty every other address is allowed; when it is not, only addresses in
// one of its prefixes are. A single address is the prefix of its full
// length (10.0.0.1/32, ::1/128). IPv4 clients over IPv6 sockets
// (::ffff:10.0.0.1) are matched as IPv4; a client without an IP address (a
// Unix socket's) is in no prefix.
//
// The address judged is Session.ClientIP, the peer of the client's
// connection. X-Forwarded-For is not read, not even from a trusted peer
// (forwarded.trusted only keeps those fields for the upstream): behind a
// load balancer, the balancer's address is the one judged.
//
// As a route phase, List answers a denied request itself: 403 with
// Proxy-Status "sluice; error=http_request_denied" (a gRPC client gets
// PERMISSION_DENIED), and the access log line ends with access=denied. A
// List is read-only once in use.
type List struct {
	Allow, Deny []netip.Prefix
}

// Allowed reports whether the list lets ip through.
func (l *List) Allowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range l.Deny {
		if p.Contains(ip) {
			return false
		}
	}
	if len(l.Allow) == 0 {
		return true
	}
	for _, p := range l.Allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// RequestFilter answers 403 to a client the list denies.
func (l *List) RequestFilter(s *proxy.Session) *proxy.Response {
	if l.Allowed(s.ClientIP) {
		return nil
	}
	s.Note("access", "denied")
	return s.ErrorResponse(&fault.Error{Kind: fault.Denied, Source: fault.Downstream,
		Context: "the route's allow and deny lists refuse " + s.Client})
}
