package observe

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
)

// Handshakes against a real TLS listener show in
// sluice_tls_handshakes_total (a resumed one apart) and failures in
// sluice_tls_handshake_failures_total by reason.
func TestTLSHandshakesInMetrics(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	ca := tlstest.NewCA(t, "test CA")
	cert := ca.Server(t, "example.com")
	p := pool.New(16, nil)
	defer p.Close()
	m := New(p)
	srv := &proxy.Server{
		Handler:       oneUpstream{&proxy.Peer{Addr: up.Addr(), Options: &proxy.PeerOptions{}}},
		Pool:          p,
		HeaderTimeout: 300 * time.Millisecond,
		ErrorLog:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer:      m,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.ServeTLS(ln, &tls.Config{Certificates: []tls.Certificate{*cert.TLS}})
	}()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		<-served
	})

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca.Pool(), ServerName: "example.com", ClientSessionCache: tls.NewLRUClientSessionCache(4),
	}, DisableKeepAlives: true}}
	for i := 0; i < 2; i++ { // the second resumes the first's session
		resp, err := client.Get("https://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	plain, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil || plain.StatusCode != 400 {
		t.Fatalf("plain HTTP on the TLS port: %v %v", plain, err)
	}
	plain.Body.Close()
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	want := []string{
		`sluice_tls_handshakes_total{resumed="false",version="1.3"} 1`,
		`sluice_tls_handshakes_total{resumed="true",version="1.3"} 1`,
		`sluice_tls_handshake_failures_total{reason="plain_http"} 1`,
		`sluice_tls_handshake_failures_total{reason="timeout"} 1`,
		`sluice_tls_handshake_failures_total{reason="version"} 0`,
	}
	var out, missing string
	if !wait.Until(wait.Timeout, func() bool {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		out, missing = rec.Body.String(), ""
		for _, w := range want {
			if !strings.Contains(out, w) {
				missing = w
			}
		}
		return missing == ""
	}) {
		t.Fatalf("metrics lack %s:\n%s", missing, out)
	}
}
