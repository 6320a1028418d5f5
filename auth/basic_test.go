package auth

import (
	"encoding/base64"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/route"
)

func basicHeader(user, password string) string {
	return "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password)) + "\r\n"
}

func TestNewBasic(t *testing.T) {
	u, err := ParseHtpasswd(strings.NewReader("a:" + hash(t, "x")))
	if err != nil {
		t.Fatal(err)
	}
	for _, realm := range []string{`a"b`, `a\b`, "a\nb", "é"} {
		if _, err := NewBasic(u, realm, false); err == nil || !strings.Contains(err.Error(), "printable ASCII") {
			t.Errorf("realm %q: %v", realm, err)
		}
	}
	if _, err := NewBasic(nil, "", false); err == nil {
		t.Error("no users: no error")
	}
	b, err := NewBasic(u, "", false)
	if err != nil || b.challenge != `Basic realm="restricted", charset="UTF-8"` {
		t.Errorf("default realm: %q, %v", b.challenge, err)
	}
}

func TestCredentials(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		v, user, password string
		ok                bool
	}{
		{"Basic " + enc("alice:secret"), "alice", "secret", true},
		{"basic " + enc("alice:sec:ret"), "alice", "sec:ret", true}, // the first colon splits
		{"BASIC  " + enc("a:"), "a", "", true},
		{"Basic " + enc(":pw"), "", "pw", true},
		{"Basic " + enc("alice"), "", "", false},
		{"Basic !!!", "", "", false},
		{"Bearer " + enc("a:b"), "", "", false},
		{"Basic", "", "", false},
		{"Basic " + strings.Repeat("A", 5000), "", "", false},
	}
	for _, tt := range tests {
		u, p, ok := credentials([]byte(tt.v))
		if ok != tt.ok || string(u) != tt.user || string(p) != tt.password {
			t.Errorf("%.30q: %q %q %v", tt.v, u, p, ok)
		}
	}
}

// TestBasicOnTheWire checks a route with basic authentication on a real
// socket: without credentials, or with wrong ones, 401 with the challenge
// and Proxy-Status, and nothing upstream; with a user's, the request goes
// upstream without its Authorization field (with it where the route
// forwards it); the access log names the user, or why it refused.
func TestBasicOnTheWire(t *testing.T) {
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Respond(200, "auth="+r.Get("Authorization"))
	})
	u, err := ParseHtpasswd(strings.NewReader("alice:" + hash(t, "wonderland") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	private, err := NewBasic(u, "Staff only", false)
	if err != nil {
		t.Fatal(err)
	}
	forwarding, err := NewBasic(u, "", true)
	if err != nil {
		t.Fatal(err)
	}
	peer := proxytest.Peer{P: &proxy.Peer{Addr: up.Addr()}}
	tbl := route.New(
		route.Route{PathPrefix: "/private/", Upstream: peer, Phases: []any{private}},
		route.Route{PathPrefix: "/forward/", Upstream: peer, Phases: []any{forwarding}},
		route.Route{Upstream: peer},
	)
	var log proxytest.Buffer
	addr := proxytest.Serve(t, &proxy.Server{Handler: tbl,
		ErrorLog:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(slog.NewTextHandler(&log, nil)),
	})
	tests := []struct {
		path, extra string
		status      int
		body, note  string
	}{
		{"/private/x", "", 401, "401 Unauthorized\n", "basic_auth=missing"},
		{"/private/x", basicHeader("alice", "wrong"), 401, "401 Unauthorized\n", "basic_auth=denied"},
		{"/private/x", basicHeader("mallory", "wonderland"), 401, "401 Unauthorized\n", "basic_auth=denied"},
		{"/private/x", "Authorization: Bearer abc\r\n", 401, "401 Unauthorized\n", "basic_auth=denied"},
		{"/private/x", basicHeader("alice", "wonderland"), 200, "auth=", "user=alice"},
		{"/forward/x", basicHeader("alice", "wonderland"), 200, "auth=" + strings.TrimSuffix(strings.TrimPrefix(basicHeader("alice", "wonderland"), "Authorization: "), "\r\n"), "user=alice"},
		{"/open", basicHeader("alice", "x"), 200, "auth=" + strings.TrimSuffix(strings.TrimPrefix(basicHeader("alice", "x"), "Authorization: "), "\r\n"), ""},
	}
	for i, tt := range tests {
		resp, body := proxytest.Do(t, addr, "GET "+tt.path+" HTTP/1.1\r\nHost: h\r\n"+tt.extra+"\r\n")
		if resp.StatusCode != tt.status || body != tt.body {
			t.Errorf("%d: %d %q, want %d %q", i, resp.StatusCode, body, tt.status, tt.body)
		}
		if tt.status == 401 {
			if got := resp.Header.Get("WWW-Authenticate"); got != `Basic realm="Staff only", charset="UTF-8"` {
				t.Errorf("%d: WWW-Authenticate %q", i, got)
			}
			if got := resp.Header.Get("Proxy-Status"); !strings.HasPrefix(got, "sluice; error=http_request_denied") {
				t.Errorf("%d: Proxy-Status %q", i, got)
			}
		}
	}
	if n := len(up.Requests()); n != 3 {
		t.Errorf("the upstream got %d requests, want the 3 let through", n)
	}
	wait.For(t, "the access log lines", func() bool { return strings.Count(log.String(), "\n") == len(tests) })
	for _, tt := range tests {
		if tt.note != "" && !strings.Contains(log.String(), " "+tt.note+"\n") {
			t.Errorf("no line ends with %s:\n%s", tt.note, log.String())
		}
	}
	if strings.Contains(log.String(), "mallory") || strings.Contains(log.String(), "wonderland") {
		t.Errorf("the log names a user refused, or a password:\n%s", log.String())
	}
}
