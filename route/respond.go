package route

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// Answer is what a Respond phase answers with.
type Answer struct {
	// Status is the answer's status, 200 to 599.
	Status int
	// Header holds the answer's fields, in order. Content-Length,
	// Transfer-Encoding and Connection are sluice's to set and are left
	// out of the answer.
	Header h1.Header
	// Body is the answer's body; a HEAD request gets none. With a body
	// and no Content-Type in Header, the answer says text/plain;
	// charset=utf-8. A 204 or 304 has no body.
	Body []byte
	// Location, when not "", is a Template (whose captures are Regexp's)
	// expanded for each request into the answer's Location field: a
	// redirect, with a 3xx Status (or 201). It must be visible ASCII.
	Location string
	// Regexp is the expression Location's captures refer to, matched
	// against the request's path (the route's PathRegex); nil for none.
	Regexp *regexp.Regexp
}

// Respond is a route phase that answers every request of its route
// itself, as nginx's return does: a fixed answer (a maintenance page, a
// health check's "ok"), or a redirect whose Location refers to the request
// ("https://$host$request_uri") and to the captures of the route's
// expression. Nothing goes upstream, and the route's error pages leave the
// answer alone (Verbatim). A Respond is made by
// NewRespond, immutable, and safe for concurrent use.
type Respond struct {
	fixed    *proxy.Response // the answer, when it is the same for every request
	location *Template
	re       *regexp.Regexp
}

// NewRespond returns the phase answering a.
func NewRespond(a Answer) (*Respond, error) {
	switch {
	case a.Status < 200 || a.Status > 599:
		return nil, fmt.Errorf("respond: status %d: want 200 to 599", a.Status)
	case (a.Status == 204 || a.Status == 304) && len(a.Body) > 0:
		return nil, fmt.Errorf("respond: a %d has no body", a.Status)
	}
	r := &proxy.Response{Status: a.Status, Body: a.Body}
	r.Header.CopyFrom(&a.Header)
	if len(a.Body) > 0 && !r.Header.Has("Content-Type") {
		r.Header.Add("Content-Type", "text/plain; charset=utf-8")
	}
	p := &Respond{fixed: r, re: a.Regexp}
	if a.Location == "" {
		return p, nil
	}
	if a.Status != 201 && (a.Status < 300 || a.Status > 399) {
		return nil, fmt.Errorf("respond: a location goes with a redirect (301, 302, 303, 307, 308) or 201, not %d", a.Status)
	}
	if r.Header.Has("Location") {
		return nil, errors.New("respond: Location is given twice, as location and among the fields")
	}
	t, err := ParseTemplate(a.Location, a.Regexp)
	if err != nil {
		return nil, fmt.Errorf("respond: location: %w", err)
	}
	p.location = t
	if t.Literal() {
		r.Header.Add("Location", string(t.Append(nil, nil, nil, nil)))
		p.location = nil
	}
	return p, nil
}

// RequestFilter answers the request.
func (p *Respond) RequestFilter(s *proxy.Session) *proxy.Response {
	if p.location == nil {
		return p.fixed // shared: the engine never changes an answer
	}
	r := &proxy.Response{Status: p.fixed.Status, Body: p.fixed.Body}
	r.Header.CopyFrom(&p.fixed.Header)
	var m []int
	path := s.Request.Path()
	if p.re != nil {
		m = p.re.FindSubmatchIndex(path)
	}
	loc := p.location.Append(s.Scratch(), s, path, m)
	r.Header.AddBytes([]byte("Location"), loc)
	s.KeepScratch(loc)
	return r
}

// Verbatim reports that the phase's answers go to the client as they are:
// they are the operator's own, which no error page replaces.
func (p *Respond) Verbatim(*proxy.Response) bool { return true }
