// Package limit is a route phase that bounds request bodies.
package limit

import (
	"github.com/sluice-proxy/sluice/proxy"
)

// Body bounds the request bodies of a route to Max bytes of content, with
// Session.LimitBody: a Content-Length over Max is answered 413 before
// anything is sent upstream; a body of unknown length (chunked, HTTP/2
// without content-length) that grows past Max is cut as it arrives, the
// try aborted, and the client answered 413 if no response byte went to it.
// The access log line of such a request ends with body_limit=exceeded.
// Max 0 allows no body at all; the config builds no Body for its 0, which
// means no limit there.
type Body struct {
	Max int64
}

// RequestFilter sets the session's body limit; it never answers.
func (b Body) RequestFilter(s *proxy.Session) *proxy.Response {
	s.LimitBody(b.Max)
	return nil
}
