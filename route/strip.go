package route

import (
	"strings"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// StripPrefix is a route phase that removes Prefix from the front of the
// path sent upstream: with Prefix "/api/", a request for /api/x?q=1 goes
// upstream as /x?q=1, and /api/ as /. The query is kept.
//
// A Prefix that does not end in "/" is stripped only at a segment
// boundary: with "/api", /api/x goes as /x, /api and /api?q=1 as / and
// /?q=1, and /apix (which a route with that path_prefix matches) goes as it
// came, since it is not under /api. A request whose path does not start
// with Prefix goes as it came.
//
// The rewrite is made in the head sent upstream, on every try, so a retry
// sends the same path; the session's Request keeps the client's target,
// which the access log shows, and the line ends with stripped=PREFIX for a
// request that was rewritten.
type StripPrefix struct {
	Prefix string
}

// rest returns what follows the prefix in target, when the prefix is to
// be stripped from it: the remaining path with its query, starting with
// "/" or "?", or empty.
func (p StripPrefix) rest(target []byte) ([]byte, bool) {
	n := len(p.Prefix)
	if n == 0 || len(target) < n || string(target[:n]) != p.Prefix {
		return nil, false
	}
	if strings.HasSuffix(p.Prefix, "/") {
		return target[n-1:], true // the prefix's "/" begins what is left
	}
	rest := target[n:]
	if len(rest) > 0 && rest[0] != '/' && rest[0] != '?' {
		return nil, false // /apix is not under /api
	}
	return rest, true
}

// RequestFilter notes, for the access log, that the request's path will
// be stripped.
func (p StripPrefix) RequestFilter(s *proxy.Session) *proxy.Response {
	if _, ok := p.rest(s.Request.Target()); ok {
		s.Note("stripped", p.Prefix)
	}
	return nil
}

// UpstreamRequestFilter strips the prefix from the target sent upstream.
func (p StripPrefix) UpstreamRequestFilter(s *proxy.Session, _ *proxy.Peer, req *h1.Request) {
	rest, ok := p.rest(req.Target())
	if !ok {
		return
	}
	if len(rest) > 0 && rest[0] == '/' {
		req.SetTargetBytes(rest)
		return
	}
	// "" or "?q": the path becomes "/".
	b := append(s.Scratch(), '/')
	b = append(b, rest...)
	req.SetTargetBytes(b)
	s.KeepScratch(b)
}
