package access

import (
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/route"
)

func prefixes(ss ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range ss {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}

func TestAllowed(t *testing.T) {
	tests := []struct {
		allow, deny []string
		ip          string
		want        bool
	}{
		{nil, nil, "192.0.2.1", true},
		{[]string{"10.0.0.0/8"}, nil, "10.1.2.3", true},
		{[]string{"10.0.0.0/8"}, nil, "192.0.2.1", false},
		{[]string{"10.0.0.0/8"}, []string{"10.0.0.0/16"}, "10.0.9.9", false}, // deny wins
		{[]string{"10.0.0.0/8"}, []string{"10.0.0.0/16"}, "10.1.0.1", true},
		{nil, []string{"192.0.2.7/32"}, "192.0.2.7", false},
		{nil, []string{"192.0.2.7/32"}, "192.0.2.8", true},
		{[]string{"10.0.0.0/8"}, nil, "::ffff:10.0.0.1", true}, // IPv4 over an IPv6 socket
		{[]string{"2001:db8::/32"}, nil, "2001:db8::1", true},
		{[]string{"2001:db8::/32"}, nil, "10.0.0.1", false},
		{[]string{"0.0.0.0/0"}, []string{"::/0"}, "10.0.0.1", true}, // an IPv6 deny-all leaves IPv4 alone
		{[]string{"10.0.0.0/8"}, nil, "", false},                    // no address: in no prefix
		{nil, []string{"10.0.0.0/8"}, "", true},
	}
	for _, tt := range tests {
		l := &List{Allow: prefixes(tt.allow...), Deny: prefixes(tt.deny...)}
		var ip netip.Addr
		if tt.ip != "" {
			ip = netip.MustParseAddr(tt.ip)
		}
		if got := l.Allowed(ip); got != tt.want {
			t.Errorf("allow %v deny %v: %s allowed %v, want %v", tt.allow, tt.deny, tt.ip, got, tt.want)
		}
	}
}

// TestDeniedOverSockets checks a route's list against a real client on
// 127.0.0.1: denied, it gets 403 with Proxy-Status, the upstream never
// hears of the request, and the access log notes it.
func TestDeniedOverSockets(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hello"))
	peer := proxytest.Peer{P: &proxy.Peer{Addr: up.Addr()}}
	tbl := route.New(
		route.Route{PathPrefix: "/open", Upstream: peer, Phases: []any{&List{Allow: prefixes("127.0.0.1/32")}}},
		route.Route{PathPrefix: "/internal", Upstream: peer, Phases: []any{&List{Allow: prefixes("10.0.0.0/8")}}},
		route.Route{PathPrefix: "/blocked", Upstream: peer, Phases: []any{&List{Allow: prefixes("127.0.0.0/8"), Deny: prefixes("127.0.0.1/32")}}},
	)
	var mu sync.Mutex
	var log strings.Builder
	addr := proxytest.Serve(t, &proxy.Server{Handler: tbl,
		ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return log.Write(p)
		}), nil)),
	})
	tests := []struct {
		path   string
		status int
	}{
		{"/open", 200},
		{"/internal", 403},
		{"/blocked", 403},
	}
	for _, tt := range tests {
		resp, body := proxytest.Do(t, addr, "GET "+tt.path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		if resp.StatusCode != tt.status {
			t.Errorf("GET %s: %d %q, want %d", tt.path, resp.StatusCode, body, tt.status)
		}
		if tt.status == 403 && resp.Header.Get("Proxy-Status") != "sluice; error=http_request_denied" {
			t.Errorf("GET %s: Proxy-Status %q", tt.path, resp.Header.Get("Proxy-Status"))
		}
	}
	// A gRPC call refused gets its status as gRPC reads it.
	resp, _ := proxytest.Do(t, addr, "POST /internal HTTP/1.1\r\nHost: h\r\nContent-Type: application/grpc\r\nContent-Length: 0\r\n\r\n")
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "7" {
		t.Errorf("a gRPC call refused: %d grpc-status %q, want 200 with 7 (PERMISSION_DENIED)", resp.StatusCode, resp.Header.Get("Grpc-Status"))
	}
	if n := len(up.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests, want 1 (the allowed one)", n)
	}
	wait.For(t, "four access log lines", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(log.String(), "\n") == 4
	})
	mu.Lock()
	defer mu.Unlock()
	// Each line is written once its request is answered: in any order.
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if noted := strings.HasSuffix(line, " access=denied"); noted != !strings.Contains(line, "target=/open") {
			t.Errorf("access log line %q: noted %v", line, noted)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
