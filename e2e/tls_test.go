package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/proxy"
)

// TestGunicornBehindTLS is the README's Django setup end to end: gunicorn
// behind sluice's TLS listener makes the request's scheme https (what
// Django's SECURE_PROXY_SSL_HEADER reads), behind its plain listener http,
// whatever X-Forwarded-Proto the client sent; and the client's own
// X-Forwarded-For does not reach it.
func TestGunicornBehindTLS(t *testing.T) {
	python := needGunicorn(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	g, err := StartGunicorn(ctx, GunicornOptions{Dir: dir, Python: python})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "example.com").Write(t, dir, "site")

	cfg, err := config.Parse("e2e.yaml", []byte(fmt.Sprintf(`listen:
  - address: 127.0.0.1:0
    tls: {certificates: [{cert: %s, key: %s}]}
  - address: 127.0.0.1:0
access_log: {enabled: false}
routes: [{upstream: django}]
upstreams:
  django:
    servers: [{address: %s}]
`, cert, key, g.Addr)))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := config.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	listeners, err := config.NewListeners(cfg, gen)
	if err != nil {
		t.Fatal(err)
	}
	srv, res, err := config.NewServer(cfg, gen, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var lns []net.Listener
	var bound []net.Addr
	for range cfg.Listen {
		ln, err := proxy.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns, bound = append(lns, ln), append(bound, ln.Addr())
	}
	for i, ln := range lns {
		go srv.ServeWith(ln, listeners.Options(i, bound))
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		srv.Shutdown(sctx)
		res.Close()
	}()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "example.com"}}}
	tests := []struct {
		url, proto, want string
	}{
		{"https://" + bound[0].String() + "/-/scheme", "http", "https 127.0.0.1"},
		{"http://" + bound[1].String() + "/-/scheme", "https", "http 127.0.0.1"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequestWithContext(ctx, "GET", tt.url, nil)
		req.Header.Set("X-Forwarded-Proto", tt.proto)
		req.Header.Set("X-Forwarded-For", "203.0.113.66")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := strings.TrimSpace(string(body)); resp.StatusCode != 200 || got != tt.want {
			t.Errorf("%s, the client claiming %s: %d %q; gunicorn should see %q", tt.url, tt.proto, resp.StatusCode, got, tt.want)
		}
	}
}
