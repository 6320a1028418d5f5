package upstream

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/proxy"
)

func TestResult(t *testing.T) {
	up := func(k fault.Kind) *fault.Error { return &fault.Error{Kind: k, Source: fault.Upstream} }
	tests := []struct {
		name string
		a    proxy.Attempt
		want balance.FailureKind
	}{
		{"answered", proxy.Attempt{Status: 200}, balance.NoFailure},
		{"answered 503: the group counts the status", proxy.Attempt{Status: 503}, balance.NoFailure},
		{"status the policy retries", proxy.Attempt{Status: 503, Err: up(fault.UpstreamStatus)}, balance.NoFailure},
		{"refused", proxy.Attempt{Err: up(fault.ConnectRefused)}, balance.ConnectFailure},
		{"unreachable", proxy.Attempt{Err: up(fault.ConnectUnreachable)}, balance.ConnectFailure},
		{"DNS", proxy.Attempt{Err: up(fault.DNS)}, balance.ConnectFailure},
		{"connect timeout", proxy.Attempt{Err: up(fault.ConnectTimeout)}, balance.Timeout},
		{"TLS handshake failed", proxy.Attempt{Err: up(fault.TLSHandshake)}, balance.ConnectFailure},
		{"certificate did not verify", proxy.Attempt{Err: up(fault.TLSCertificate)}, balance.ConnectFailure},
		{"TLS handshake refused late (TLS 1.3)", proxy.Attempt{Err: up(fault.TLSAlert), Wrote: 80}, balance.ConnectFailure},
		{"response timeout", proxy.Attempt{Err: up(fault.ResponseTimeout)}, balance.Slow},
		{"write timeout", proxy.Attempt{Err: up(fault.WriteTimeout)}, balance.Slow},
		{"read timeout", proxy.Attempt{Err: up(fault.ReadTimeout), Reused: true}, balance.Slow},
		{"invalid response", proxy.Attempt{Err: up(fault.InvalidResponse)}, balance.InvalidResponse},
		{"truncated body", proxy.Attempt{Err: up(fault.BodyTruncated), Read: 100}, balance.InvalidResponse},
		{"closed on a new connection", proxy.Attempt{Err: up(fault.ConnectionClosed)}, balance.InvalidResponse},
		{"stale pooled connection: closed", proxy.Attempt{Err: up(fault.ConnectionClosed), Reused: true}, balance.Canceled},
		{"stale pooled connection: reset", proxy.Attempt{Err: up(fault.ConnectionReset), Reused: true, Wrote: 80}, balance.Canceled},
		{"stale pooled connection: write failed", proxy.Attempt{Err: up(fault.WriteError), Reused: true}, balance.Canceled},
		{"reused, closed after response bytes", proxy.Attempt{Err: up(fault.ConnectionClosed), Reused: true, Read: 10}, balance.InvalidResponse},
		{"reused, reset after response bytes", proxy.Attempt{Err: up(fault.ConnectionReset), Reused: true, Read: 10}, balance.InvalidResponse},
		{"client went away", proxy.Attempt{Err: &fault.Error{Kind: fault.ClientClosed, Source: fault.Downstream}}, balance.Canceled},
		{"internal", proxy.Attempt{Err: &fault.Error{Kind: fault.Internal, Source: fault.Internally}}, balance.Canceled},
	}
	for _, tt := range tests {
		tt.a.Wait = 7 * time.Millisecond
		got := Result(&tt.a)
		want := balance.Result{Failure: tt.want, Status: tt.a.Status, Duration: 7 * time.Millisecond}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, want)
		}
	}
}
