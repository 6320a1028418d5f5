package main

import (
	"testing"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy"
)

func TestGateway(t *testing.T) {
	stable := upstreamtest.Start(t, upstreamtest.OK("stable"))
	beta := upstreamtest.Start(t, upstreamtest.OK("beta"))
	addr := proxytest.Serve(t, &proxy.Server{Handler: NewGateway(stable.Addr(), beta.Addr())})

	if code, body := proxytest.Get(t, addr, "/healthz", ""); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if stable.Accepts()+beta.Accepts() != 0 {
		t.Fatal("/healthz reached an upstream")
	}
	if _, body := proxytest.Get(t, addr, "/x", ""); body != "stable" {
		t.Fatalf("default route: %q", body)
	}
	if _, body := proxytest.Get(t, addr, "/x", "X-Tenant: beta\r\n"); body != "beta" {
		t.Fatalf("beta route: %q", body)
	}
	if got := stable.Requests()[0].Get("X-Proxied-By"); got != "custom-sluice" {
		t.Fatalf("X-Proxied-By = %q", got)
	}
}
