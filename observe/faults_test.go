package observe

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
)

// oneUpstream sends every request to one server.
type oneUpstream struct{ peer *proxy.Peer }

func (h oneUpstream) UpstreamPeer(*proxy.Session) (*proxy.Peer, error) { return h.peer, nil }

// N heads that time out against a real proxy show as exactly N in
// sluice_client_faults_total.
func TestHeaderTimeoutsInMetrics(t *testing.T) {
	const n = 50
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
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
	addr := proxytest.Serve(t, srv)
	done := make(chan int, n)
	for i := 0; i < n; i++ {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(nc, "GET / HTTP/1.1\r\nHo")
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
			if err != nil {
				done <- -1
				return
			}
			done <- resp.StatusCode
		}()
	}
	for i := 0; i < n; i++ {
		if code := <-done; code != 408 {
			t.Fatalf("a slow head got %d, want 408", code)
		}
	}
	if code, _ := proxytest.Get(t, addr, "/", ""); code != 200 {
		t.Fatalf("a normal request: %d", code)
	}
	want := `sluice_client_faults_total{kind="client_timeout",stage="head"} 50`
	var out string
	if !wait.Until(wait.Timeout, func() bool {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		out = rec.Body.String()
		return strings.Contains(out, want)
	}) {
		t.Fatalf("metrics lack %s:\n%s", want, out)
	}
}
