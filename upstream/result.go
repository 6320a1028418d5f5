package upstream

import (
	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/proxy"
)

// Result turns a try into what the balancer's health rules need. A stale
// pooled connection (reused, closed before any response byte) is the
// keep-alive race, not the server's failure; a failure on the client's side
// is nobody's.
func Result(a *proxy.Attempt) balance.Result {
	r := balance.Result{Status: a.Status, Duration: a.Wait}
	e := a.Err
	if e == nil {
		return r
	}
	switch {
	case e.Source != fault.Upstream:
		r.Failure = balance.Canceled
	case e.Kind == fault.ConnectTimeout:
		r.Failure = balance.Timeout
	case e.Kind.Connect():
		r.Failure = balance.ConnectFailure
	case e.Kind.Timeout():
		r.Failure = balance.Timeout
	case e.Kind == fault.UpstreamStatus:
		r.Failure = balance.NoFailure // the group counts the status itself
	case a.Reused && a.Read == 0 && (e.Kind == fault.ConnectionClosed || e.Kind == fault.ConnectionReset || e.Kind == fault.WriteError):
		r.Failure = balance.Canceled
	default:
		r.Failure = balance.InvalidResponse
	}
	return r
}
