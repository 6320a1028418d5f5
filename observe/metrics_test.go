package observe

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
)

func TestMetricsCount(t *testing.T) {
	p := pool.New(10, nil)
	defer p.Close()
	m := New(p)
	m.WatchServers(func(report func(ServerState)) {
		report(ServerState{Upstream: "api", Server: "127.0.0.1:1", Healthy: false, Drained: true, Outstanding: 2})
	})
	peer := &proxy.Peer{Addr: "127.0.0.1:1", Upstream: "api"}
	s := &proxy.Session{Start: time.Now(), Status: 200}
	failed := proxy.Attempt{Peer: peer, Reused: true, Err: &fault.Error{Kind: fault.ConnectionClosed, Source: fault.Upstream, Retry: true}}
	ok := proxy.Attempt{Peer: peer, StaleResend: true}
	short := proxy.Attempt{Peer: peer, Err: fault.FromIO(&net.OpError{Op: "dial", Err: os.NewSyscallError("socket", syscall.EMFILE)}, fault.PhaseConnect)}
	s.Attempts = []proxy.Attempt{failed, ok}
	m.Try(s, &s.Attempts[0])
	m.Try(s, &s.Attempts[1])
	m.Try(&proxy.Session{}, &short)
	m.BudgetDenied(s, peer)
	m.Shed(3, &net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EMFILE)})
	m.Done(s)
	timeout := &fault.Error{Kind: fault.ClientTimeout, Source: fault.Downstream}
	m.ClientFault(proxy.InHead, timeout)
	m.ClientFault(proxy.InHead, timeout)
	m.ClientFault(proxy.InBody, &fault.Error{Kind: fault.ClientClosed, Source: fault.Downstream})
	m.ClientFault(proxy.InResponse, &fault.Error{Kind: fault.Internal, Source: fault.Downstream})

	m.ConfigLoaded("abc123", time.Unix(1700000000, 0))
	m.Reloaded(nil)
	m.Reloaded(errors.New("bad file"))
	m.Reloaded(nil)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{
		`sluice_upstream_server_drained{server="127.0.0.1:1",upstream="api"} 1`,
		`sluice_config_info{hash="abc123"} 1`,
		`sluice_config_load_timestamp_seconds 1.7e+09`,
		`sluice_config_reloads_total{result="success"} 2`,
		`sluice_config_reloads_total{result="failure"} 1`,
		`go_goroutines `,
		`go_memstats_alloc_bytes `,
		`sluice_requests_total{code="200",upstream="api"} 1`,
		`sluice_upstream_tries_total{outcome="connection_closed",upstream="api"} 1`,
		`sluice_upstream_tries_total{outcome="ok",upstream="api"} 1`,
		`sluice_retries_total{reason="connection_closed",upstream="api"} 1`,
		`sluice_stale_resends_total{upstream="api"} 1`,
		`sluice_retry_budget_denied_total{upstream="api"} 1`,
		`sluice_pool_idle_connections 0`,
		`sluice_pool_closed_while_idle_total 0`,
		`sluice_pool_untrusted_total 0`,
		`sluice_local_exhaustion_total{op="upstream",resource="descriptors"} 1`,
		`sluice_local_exhaustion_total{op="accept",resource="descriptors"} 3`,
		`sluice_not_retried_total{reason="local_resources_exhausted",upstream="api"} 1`,
		`sluice_upstream_server_healthy{server="127.0.0.1:1",upstream="api"} 0`,
		`sluice_upstream_server_outstanding{server="127.0.0.1:1",upstream="api"} 2`,
		`sluice_client_faults_total{kind="client_timeout",stage="head"} 2`,
		`sluice_client_faults_total{kind="client_closed",stage="body"} 1`,
		`sluice_client_faults_total{kind="bad_request",stage="head"} 0`,
		`sluice_client_faults_total{kind="internal",stage="response"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}
