// Package route maps requests to upstream groups: the routing table of the
// config-driven proxy, itself a proxy.Handler.
package route

import (
	"bytes"
	"regexp"
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
//
// The path conditions are matched against the request's path as it came
// (its target up to any "?"), neither percent-decoded nor normalized; a
// condition left empty matches every path, and a route that sets several
// matches a path that meets all of them.
type Route struct {
	// Host matches the request's Host without its port, ignoring case; ""
	// matches any host, and "*.example.com" matches one or more labels in
	// front of example.com.
	Host string
	// PathPrefix matches the start of the request path; "" matches all.
	PathPrefix string
	// Path matches the request path exactly (nginx's "location ="): "/"
	// matches "/" alone, and "/healthz" neither "/healthz/" nor
	// "/healthz.json"; "" matches all.
	Path string
	// PathRegex, when not nil, matches paths it finds a match in, Go's
	// RE2 syntax (linear in the path's length, whatever the expression):
	// unanchored, as nginx's "location ~", so "^/api/v[0-9]+/" needs its
	// "^"; "(?i)" in front ignores case. Its captures are for the route's
	// phases (Rewrite, Respond).
	PathRegex *regexp.Regexp
	// Upstream is where matching requests go; Name is for logs. A route
	// whose phases answer every request itself (static files, say) may
	// have none: a request that reaches it is answered 503.
	Name     string
	Upstream Picker
	// Phases are the route's own handling of the requests it matches
	// (header rules, limits, compression, static files), run in order.
	// Each implements one or more of proxy.RequestFilter,
	// proxy.UpstreamRequestFilter, proxy.UpstreamResponseFilter,
	// proxy.ResponseFilter,
	// proxy.AnswerFilter, proxy.FailToProxy and ErrorPages; New sorts them
	// by what they implement, once, and ignores a phase that implements
	// none. The first RequestFilter that answers ends the request, and its
	// answer goes through the ErrorPages (unless the phase is Verbatim
	// about it). The first FailToProxy that answers a request that failed
	// for good gives its answer. AnswerFilters see the answers sluice
	// makes itself to the requests the route matched (a phase's own, an
	// error's).
	Phases []any

	request  []proxy.RequestFilter
	upstream []proxy.UpstreamRequestFilter
	upResp   []proxy.UpstreamResponseFilter
	response []proxy.ResponseFilter
	answer   []proxy.AnswerFilter
	fail     []proxy.FailToProxy
	pages    []ErrorPages
	label    string // the route in the access log: host and path
}

// ErrorPages is a route phase that may give an answer a route's phase
// handed back another body (an error page: see package errpage). It
// returns r, or an answer made from it; it must not change r, which may be
// shared.
type ErrorPages interface {
	ErrorPage(s *proxy.Session, r *proxy.Response) *proxy.Response
}

// Verbatim is implemented by a phase whose answers may be words that must
// reach the client as they are (a respond's body, an auth service's
// answer): Verbatim reports whether r, which the phase handed back, is
// such an answer, which the route's ErrorPages then leave alone.
type Verbatim interface {
	Verbatim(r *proxy.Response) bool
}

// Label names the route in the access log (route=): its host ("*" for
// any) followed by its path prefix, such as "api.example.com/v1/",
// "*.example.com" or "*"; an exact Path follows "=" ("*=/healthz"), and a
// PathRegex follows "~" ("*~^/api/v[0-9]+/").
func (r *Route) Label() string {
	if r.label != "" {
		return r.label
	}
	return label(r)
}

func label(r *Route) string {
	host := r.Host
	if host == "" {
		host = "*"
	}
	l := host + r.PathPrefix
	if r.Path != "" {
		l += "=" + r.Path
	}
	if r.PathRegex != nil {
		l += "~" + r.PathRegex.String()
	}
	return l
}

// Table is an ordered list of routes: a request goes to the first route,
// in the order given, whose host and path conditions it meets, whatever
// kind of path condition each has (sluice does not reorder them as nginx
// does its locations: a more specific route goes before a more general
// one). A request no route matches is answered 404. A Table is immutable
// once built and safe for concurrent use.
//
// A Table is the proxy's Handler: it matches a request once, in its
// RequestFilter, and keeps the route in the session's Ctx, so that every
// try and every phase of the request sees the same route even when a
// phase rewrote the path. A Handler wrapping a Table must leave Ctx to it.
type Table struct {
	routes    []Route
	unmatched proxy.FailToProxy
}

// New returns a table of routes, in order.
func New(routes ...Route) *Table {
	t := &Table{routes: make([]Route, len(routes))}
	for i, r := range routes {
		r.Host = strings.ToLower(r.Host)
		r.label = label(&r)
		r.request, r.upstream, r.upResp, r.response, r.answer, r.fail, r.pages = nil, nil, nil, nil, nil, nil, nil
		for _, p := range r.Phases {
			if f, ok := p.(proxy.RequestFilter); ok {
				r.request = append(r.request, f)
			}
			if f, ok := p.(proxy.UpstreamRequestFilter); ok {
				r.upstream = append(r.upstream, f)
			}
			if f, ok := p.(proxy.UpstreamResponseFilter); ok {
				r.upResp = append(r.upResp, f)
			}
			if f, ok := p.(proxy.ResponseFilter); ok {
				r.response = append(r.response, f)
			}
			if f, ok := p.(proxy.AnswerFilter); ok {
				r.answer = append(r.answer, f)
			}
			if f, ok := p.(proxy.FailToProxy); ok {
				r.fail = append(r.fail, f)
			}
			if f, ok := p.(ErrorPages); ok {
				r.pages = append(r.pages, f)
			}
		}
		t.routes[i] = r
	}
	return t
}

// WithUnmatched returns a copy of t whose answers to the requests no route
// matches (404, destination_not_found) f may give: an error page, say
// (errpage.Pages). The routes are shared with t.
func (t *Table) WithUnmatched(f proxy.FailToProxy) *Table {
	c := *t
	c.unmatched = f
	return &c
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
		if r.Path != "" && string(path) != r.Path {
			continue
		}
		if r.PathRegex != nil && !r.PathRegex.Match(path) {
			continue
		}
		return r
	}
	return nil
}

// RequestFilter matches the session's request to its route, keeps the
// route in s.Ctx and runs the route's request phases. A request no route
// matches goes on to UpstreamPeer, which answers it.
func (t *Table) RequestFilter(s *proxy.Session) *proxy.Response {
	r := t.Match(s.Request.Header.Get("Host"), s.Request.Path())
	if r == nil {
		return nil
	}
	s.Ctx = r
	s.SetRoute(r.label)
	for _, f := range r.request {
		if resp := f.RequestFilter(s); resp != nil {
			if v, ok := f.(Verbatim); ok && v.Verbatim(resp) {
				return resp
			}
			for _, p := range r.pages {
				resp = p.ErrorPage(s, resp)
			}
			return resp
		}
	}
	return nil
}

// FailToProxy gives the answer to a request that failed for good: the
// first answer of its route's FailToProxy phases, or, for a request no
// route matched, the table's WithUnmatched hook's; nil leaves the default.
func (t *Table) FailToProxy(s *proxy.Session, e *fault.Error) *proxy.Response {
	r, ok := s.Ctx.(*Route)
	if !ok {
		if t.unmatched != nil {
			return t.unmatched.FailToProxy(s, e)
		}
		return nil
	}
	for _, f := range r.fail {
		if resp := f.FailToProxy(s, e); resp != nil {
			return resp
		}
	}
	return nil
}

// route returns the session's route: the one RequestFilter matched, or,
// for a session that did not pass through it (a Handler wrapping the
// Table), a match made now.
func (t *Table) route(s *proxy.Session) *Route {
	if r, ok := s.Ctx.(*Route); ok {
		return r
	}
	return t.Match(s.Request.Header.Get("Host"), s.Request.Path())
}

// UpstreamPeer asks the picker of the session's route for a peer.
func (t *Table) UpstreamPeer(s *proxy.Session) (*proxy.Peer, error) {
	r := t.route(s)
	if r == nil {
		return nil, &fault.Error{Kind: fault.NoRoute, Source: fault.Internally, Context: "no route matches the request"}
	}
	s.SetRoute(r.label)
	if r.Upstream == nil {
		return nil, &fault.Error{Kind: fault.NoUpstream, Source: fault.Internally, Context: "route " + r.Name + " has no upstream"}
	}
	return r.Upstream.Pick(s)
}

// UpstreamRequestFilter runs the route's phases that change the head sent
// upstream, on every try.
func (t *Table) UpstreamRequestFilter(s *proxy.Session, peer *proxy.Peer, req *h1.Request) {
	if r := t.route(s); r != nil {
		for _, f := range r.upstream {
			f.UpstreamRequestFilter(s, peer, req)
		}
	}
}

// UpstreamResponseFilter runs the route's phases that see the upstream's
// response before the response phases; the first that answers instead of
// the upstream gives the answer, and the phases after it are not asked.
func (t *Table) UpstreamResponseFilter(s *proxy.Session, peer *proxy.Peer, resp *h1.Response) *proxy.Response {
	if r := t.route(s); r != nil {
		for _, f := range r.upResp {
			if a := f.UpstreamResponseFilter(s, peer, resp); a != nil {
				return a
			}
		}
	}
	return nil
}

// ResponseFilter runs the route's phases that change the response head.
func (t *Table) ResponseFilter(s *proxy.Session, peer *proxy.Peer, resp *h1.Response) {
	if r := t.route(s); r != nil {
		for _, f := range r.response {
			f.ResponseFilter(s, peer, resp)
		}
	}
}

// AnswerFilter runs the route's phases that change the answers sluice makes
// itself, for a request that RequestFilter matched to a route: a request
// no route matched (404), or that broke HTTP/1.1 before it was matched,
// has no route and gets none of them.
func (t *Table) AnswerFilter(s *proxy.Session, resp *h1.Response) {
	if r, ok := s.Ctx.(*Route); ok {
		for _, f := range r.answer {
			f.AnswerFilter(s, resp)
		}
	}
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
