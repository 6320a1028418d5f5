package route

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// Rewrite is a route phase that rewrites the path sent upstream, as
// nginx's rewrite does: when its expression finds a match in the request's
// path (the target up to any "?"), the path becomes the replacement,
// expanded with the match's captures (see Template). The whole path is
// replaced, not only the part the expression matched.
//
// The query is kept: with ^/old/(.*)$ and /new/$1, /old/a?q=1 goes
// upstream as /new/a?q=1. A replacement that gives a query of its own
// ("/search?q=$1") replaces the request's ($args brings it back:
// "/search?q=$1&$args"), and one that ends in "?" drops it. (nginx instead
// appends the request's query to one the replacement gives, unless it ends
// in "?".) A path the expression finds no match in goes as it came.
//
// The rewrite is made in the head of every try, so a retry sends the same
// path; the session's Request keeps the client's target, which the access
// log shows and a balancer hashing on the URI sees, and the line ends with
// rewritten=TARGET. A Rewrite is made by NewRewrite, immutable, and safe
// for concurrent use.
type Rewrite struct {
	re *regexp.Regexp
	to *Template
}

// NewRewrite returns the phase that rewrites the paths re finds a match in
// to replacement (a Template whose captures are re's). The replacement
// must start with "/", and hold no "#".
func NewRewrite(re *regexp.Regexp, replacement string) (*Rewrite, error) {
	if re == nil {
		return nil, errors.New("rewrite: no regular expression")
	}
	to, err := ParseTemplate(replacement, re)
	if err != nil {
		return nil, fmt.Errorf("rewrite: %w", err)
	}
	if !to.StartsWith("/") {
		return nil, fmt.Errorf("rewrite: the replacement %q must start with \"/\": it is the path sent upstream", replacement)
	}
	if i := bytes.IndexByte([]byte(replacement), '#'); i >= 0 {
		return nil, fmt.Errorf("rewrite: at %d: a fragment (#) is never sent in a request", i)
	}
	return &Rewrite{re: re, to: to}, nil
}

// Regexp returns the phase's expression.
func (rw *Rewrite) Regexp() *regexp.Regexp { return rw.re }

// Replacement returns the phase's replacement.
func (rw *Rewrite) Replacement() *Template { return rw.to }

// appendTarget appends to dst the target that target is rewritten to, and
// reports whether it is rewritten.
func (rw *Rewrite) appendTarget(dst []byte, s *proxy.Session, target []byte) ([]byte, bool) {
	path, query, hasQuery := bytes.Cut(target, []byte("?"))
	m := rw.re.FindSubmatchIndex(path)
	if m == nil {
		return dst, false
	}
	start := len(dst)
	dst = rw.to.Append(dst, s, path, m)
	switch q := bytes.IndexByte(dst[start:], '?'); {
	case q < 0 && hasQuery:
		dst = append(dst, '?')
		dst = append(dst, query...)
	case q >= 0 && start+q == len(dst)-1:
		dst = dst[:len(dst)-1] // a final "?": no query
	}
	return dst, true
}

// RequestFilter notes, for the access log, the target the request is sent
// upstream with.
func (rw *Rewrite) RequestFilter(s *proxy.Session) *proxy.Response {
	b, ok := rw.appendTarget(s.Scratch(), s, s.Request.Target())
	if ok {
		s.Note("rewritten", string(b))
	}
	s.KeepScratch(b)
	return nil
}

// UpstreamRequestFilter rewrites the target sent upstream.
func (rw *Rewrite) UpstreamRequestFilter(s *proxy.Session, _ *proxy.Peer, req *h1.Request) {
	b, ok := rw.appendTarget(s.Scratch(), s, req.Target())
	if ok {
		req.SetTargetBytes(b)
	}
	s.KeepScratch(b)
}
