// Package errpage gives the answers sluice makes itself the operator's
// pages, as nginx's error_page does: a 502 or 503 of sluice's own, a
// route's 401, 403, 413 or 429, a 404 for a path no route takes, with a
// body of the operator's (an HTML page in the site's style) in place of
// sluice's short text, its status and fields (Proxy-Status,
// Retry-After...) kept.
//
// Pages are a route phase (route.Route's Phases) and a proxy.FailToProxy
// hook: route.Table hands them the failures of the requests of their
// route, and the answers the route's other phases hand back; a
// route.Table's WithUnmatched takes them for the requests no route
// matches. A response relayed from an upstream is never touched, whatever
// its status: an upstream's own 502 reaches the client as it came. Nor is
// the answer to a gRPC call (its status is in grpc-status, and its client
// reads no body), nor one its phase says goes as it is (route.Verbatim: a
// respond's, an auth service's).
package errpage

import (
	"fmt"
	"sort"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// Page is the body of the answers with one status.
type Page struct {
	// Body is the page; it is shared by every answer and never changed.
	Body []byte
	// ContentType is the answer's Content-Type.
	ContentType string
}

// Pages maps statuses to pages. It is made by New, immutable, and safe
// for concurrent use.
type Pages struct {
	pages map[int]Page
}

// New returns the pages, by status: each 400 to 599, with a ContentType.
func New(pages map[int]Page) (*Pages, error) {
	p := &Pages{pages: make(map[int]Page, len(pages))}
	for status, page := range pages {
		if status < 400 || status > 599 {
			return nil, fmt.Errorf("errpage: status %d: pages are for 400 to 599", status)
		}
		if page.ContentType == "" || !h1.ValidValue(page.ContentType) {
			return nil, fmt.Errorf("errpage: status %d: Content-Type %q is not a field value", status, page.ContentType)
		}
		p.pages[status] = page
	}
	return p, nil
}

// Statuses returns the statuses that have a page, in order.
func (p *Pages) Statuses() []int {
	s := make([]int, 0, len(p.pages))
	for status := range p.pages {
		s = append(s, status)
	}
	sort.Ints(s)
	return s
}

// ErrorPage returns r with the page of its status as its body, or r
// itself when there is none, or when the request is a gRPC call. r is not
// changed (it may be shared): the answer is a copy of its status and
// fields, with the page's Content-Type.
func (p *Pages) ErrorPage(s *proxy.Session, r *proxy.Response) *proxy.Response {
	page, ok := p.pages[r.Status]
	if !ok || r.Header.Has("Grpc-Status") || (s != nil && isGRPC(&s.Request.Header)) {
		return r
	}
	out := &proxy.Response{Status: r.Status, Body: page.Body}
	for i := 0; i < r.Header.Len(); i++ {
		if n := r.Header.Name(i); !h1.EqualFold(n, "Content-Type") && !h1.EqualFold(n, "Content-Length") {
			out.Header.AddBytes(n, r.Header.Value(i))
		}
	}
	out.Header.Add("Content-Type", page.ContentType)
	if r.File != nil {
		// A file the page replaces is closed here: the engine closes
		// only the body it is handed.
		r.File.File.Close()
	}
	return out
}

// FailToProxy answers a request that failed for good (fault.Error) with
// the page of its status, or returns nil, leaving the default answer,
// when there is none or the request is a gRPC call. The answer keeps the
// default's status and fields (Proxy-Status, Cache-Control: no-store).
func (p *Pages) FailToProxy(s *proxy.Session, e *fault.Error) *proxy.Response {
	if _, ok := p.pages[e.Answer()]; !ok || isGRPC(&s.Request.Header) {
		return nil
	}
	return p.ErrorPage(s, s.ErrorResponse(e))
}

// isGRPC reports whether a request is a gRPC call: its Content-Type is
// application/grpc, or application/grpc+proto and the like.
func isGRPC(h *h1.Header) bool {
	ct := h.Get("Content-Type")
	const grpc = "application/grpc"
	return len(ct) >= len(grpc) && h1.EqualFold(ct[:len(grpc)], grpc) &&
		(len(ct) == len(grpc) || ct[len(grpc)] == '+' || ct[len(grpc)] == ';')
}
