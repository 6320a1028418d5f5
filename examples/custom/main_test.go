package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy"
)

func TestGateway(t *testing.T) {
	stable := upstreamtest.Start(t, upstreamtest.OK("stable"))
	beta := upstreamtest.Start(t, upstreamtest.OK("beta"))
	srv := &proxy.Server{Handler: NewGateway(stable.Addr(), beta.Addr())}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	get := func(path, extra string) (int, string) {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		io.WriteString(nc, "GET "+path+" HTTP/1.1\r\nHost: a\r\n"+extra+"\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz", ""); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if stable.Accepts()+beta.Accepts() != 0 {
		t.Fatal("/healthz reached an upstream")
	}
	if _, body := get("/x", ""); body != "stable" {
		t.Fatalf("default route: %q", body)
	}
	if _, body := get("/x", "X-Tenant: beta\r\n"); body != "beta" {
		t.Fatalf("beta route: %q", body)
	}
	if got := stable.Requests()[0].Get("X-Proxied-By"); got != "custom-sluice" {
		t.Fatalf("X-Proxied-By = %q", got)
	}
}
