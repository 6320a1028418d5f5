package limit

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/headers"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/route"
)

// TestBodyOverSockets checks the phase in a route beside a headers phase:
// a body over the limit gets sluice's 413 with the route's response rules
// and never reaches the upstream; one within it passes, chunked or not;
// another route is not limited.
func TestBodyOverSockets(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	sec, err := headers.New(headers.Rules{}, headers.Rules{Set: []headers.Field{{Name: "X-Frame-Options", Value: "DENY"}}})
	if err != nil {
		t.Fatal(err)
	}
	peer := proxytest.Peer{P: &proxy.Peer{Addr: up.Addr()}}
	tbl := route.New(
		route.Route{PathPrefix: "/upload", Upstream: peer, Phases: []any{Body{Max: 10}, sec}},
		route.Route{Upstream: peer},
	)
	addr := proxytest.Serve(t, &proxy.Server{Handler: tbl, ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))})
	tests := []struct {
		path, head, body string
		status           int
	}{
		{"/upload", "Content-Length: 10\r\n", "0123456789", 200},
		{"/upload", "Content-Length: 11\r\n", "0123456789a", 413},
		{"/upload", "Transfer-Encoding: chunked\r\n", "a\r\n0123456789\r\n0\r\n\r\n", 200},
		{"/upload", "Transfer-Encoding: chunked\r\n", "a\r\n0123456789\r\n1\r\na\r\n0\r\n\r\n", 413},
		{"/other", "Content-Length: 11\r\n", "0123456789a", 200},
	}
	for _, tt := range tests {
		before := len(up.Requests())
		resp, body := proxytest.Do(t, addr, "POST "+tt.path+" HTTP/1.1\r\nHost: h\r\n"+tt.head+"\r\n"+tt.body)
		if resp.StatusCode != tt.status {
			t.Errorf("POST %s %q: %d %q, want %d", tt.path, tt.head, resp.StatusCode, body, tt.status)
		}
		if tt.status == 413 && (resp.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(resp.Header.Get("Proxy-Status"), "http_request_error")) {
			t.Errorf("POST %s %q: 413 without the route's header or Proxy-Status: %v", tt.path, tt.head, resp.Header)
		}
		if tt.status == 413 && strings.HasPrefix(tt.head, "Content-Length") && len(up.Requests()) != before {
			t.Errorf("POST %s %q: the upstream heard of a request over the limit", tt.path, tt.head)
		}
	}
}
