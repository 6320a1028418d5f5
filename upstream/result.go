package upstream

import (
	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/proxy"
)

// Result turns a try into what the balancer's health rules need. A stale
// pooled connection (Attempt.Stale) is the keep-alive race, not the
// server's failure; a failure on the client's side is nobody's. A failed
// TLS handshake, a certificate that does not verify included, is a connect
// failure; an HTTP/2 stream the server refused is no failure at all. A
// timeout after the connection was made is balance.Slow: it counts toward
// consecutive failures, not max_fails, so that one slow endpoint does not
// take a server that answers everything else out.
func Result(a *proxy.Attempt) balance.Result {
	r := balance.Result{Status: a.Status, Duration: a.Wait}
	if a.Duration > 0 {
		r.End = a.Start.Add(a.Duration)
	}
	e := a.Err
	if e == nil {
		return r
	}
	switch {
	case e.Source != fault.Upstream, e.Kind == fault.Refused:
		// A refused HTTP/2 stream is load shed or a deploy's GOAWAY, not
		// a failure of the server.
		r.Failure = balance.Canceled
	case e.Kind == fault.ConnectTimeout:
		r.Failure = balance.Timeout
	case e.Kind.Connect():
		r.Failure = balance.ConnectFailure
	case e.Kind.Timeout():
		r.Failure = balance.Slow
	case e.Kind == fault.UpstreamStatus:
		r.Failure = balance.NoFailure // the group counts the status itself
	case a.Stale():
		r.Failure = balance.Canceled
	default:
		r.Failure = balance.InvalidResponse
	}
	return r
}
