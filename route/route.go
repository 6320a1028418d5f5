// Package route maps requests to upstream groups: the routing table of the
// config-driven proxy, itself a proxy.Handler.
package route

import (
	"bytes"
	"strings"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// Picker chooses a peer of an upstream for one try of a request; it is
// where load balancing plugs in. It is called on every try and must be safe
// for concurrent use.
type Picker interface {
	Pick(s *proxy.Session) (*proxy.Peer, error)
}

// Route sends requests whose host and path match to an upstream.
type Route struct {
	// Host matches the request's Host without its port, ignoring case; ""
	// matches any host, and "*.example.com" matches one or more labels in
	// front of example.com.
	Host string
	// PathPrefix matches the start of the request path; "" matches all.
	PathPrefix string
	// Upstream is where matching requests go; Name is for logs.
	Name     string
	Upstream Picker

	label string // the route in the access log: host and path prefix
}

// Label names the route in the access log (route=): its host ("*" for
// any) followed by its path prefix, such as "api.example.com/v1/",
// "*.example.com" or "*".
func (r *Route) Label() string {
	if r.label != "" {
		return r.label
	}
	return label(r.Host, r.PathPrefix)
}

func label(host, prefix string) string {
	if host == "" {
		host = "*"
	}
	return host + prefix
}

// Table is an ordered list of routes; the first match wins and a request
// no route matches is answered 404. A Table is immutable once built and
// safe for concurrent use.
type Table struct {
	routes []Route
}

// New returns a table of routes, in order.
func New(routes ...Route) *Table {
	t := &Table{routes: make([]Route, len(routes))}
	for i, r := range routes {
		r.Host = strings.ToLower(r.Host)
		r.label = label(r.Host, r.PathPrefix)
		t.routes[i] = r
	}
	return t
}

// Match returns the first route for host (a Host field value, port
// allowed) and path, or nil.
func (t *Table) Match(host, path []byte) *Route {
	host = hostOnly(host)
	for i := range t.routes {
		r := &t.routes[i]
		if r.Host != "" && !hostMatch(r.Host, host) {
			continue
		}
		if r.PathPrefix != "" && !bytes.HasPrefix(path, []byte(r.PathPrefix)) {
			continue
		}
		return r
	}
	return nil
}

// UpstreamPeer routes the session's request and asks the upstream's picker
// for a peer. The route is looked up on every try; it is cheap and keeps
// no state in the session.
func (t *Table) UpstreamPeer(s *proxy.Session) (*proxy.Peer, error) {
	r := t.Match(s.Request.Header.Get("Host"), s.Request.Path())
	if r == nil {
		return nil, &fault.Error{Kind: fault.NoRoute, Source: fault.Internally, Context: "no route matches the request"}
	}
	s.SetRoute(r.label)
	return r.Upstream.Pick(s)
}

// hostOnly strips the port from a Host value.
func hostOnly(h []byte) []byte {
	if len(h) > 0 && h[0] == '[' {
		if i := bytes.IndexByte(h, ']'); i > 0 {
			return h[:i+1]
		}
		return h
	}
	if i := bytes.LastIndexByte(h, ':'); i >= 0 {
		return h[:i]
	}
	return h
}

// hostMatch compares a lower-case pattern with a host, ignoring the host's
// case and a trailing dot.
func hostMatch(pattern string, host []byte) bool {
	if n := len(host); n > 0 && host[n-1] == '.' {
		host = host[:n-1]
	}
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		// "*.example.com": at least one label before ".example.com".
		return len(host) > len(suffix) && h1.EqualFold(host[len(host)-len(suffix):], suffix)
	}
	return h1.EqualFold(host, pattern)
}

// TryDone passes the outcome of a try to the peer's Tag when the tag wants
// it (a balancer's record of the server, for passive health and latency).
func (t *Table) TryDone(s *proxy.Session, a *proxy.Attempt) {
	if a.Peer == nil {
		return
	}
	if d, ok := a.Peer.Tag.(proxy.TryDone); ok {
		d.TryDone(s, a)
	}
}
