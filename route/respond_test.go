package route

import (
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
)

func newAnswer(status int, body, location string, re *regexp.Regexp, fields ...string) Answer {
	a := Answer{Status: status, Body: []byte(body), Location: location, Regexp: re}
	for i := 0; i+1 < len(fields); i += 2 {
		a.Header.Add(fields[i], fields[i+1])
	}
	return a
}

func mustRespond(t *testing.T, a Answer) *Respond {
	t.Helper()
	p, err := NewRespond(a)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRespond checks fixed answers and redirects on the wire: nothing
// reaches the upstream, the status, fields and body are the route's, and a
// Location is expanded from the request and the route's captures.
func TestRespond(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("upstream"))
	re := regexp.MustCompile(`^/old/(?P<rest>.*)$`)
	tbl := New(
		Route{Path: "/healthz", Phases: []any{mustRespond(t, newAnswer(200, "ok\n", "", nil))}},
		Route{PathPrefix: "/down/", Phases: []any{mustRespond(t, newAnswer(503, "<h1>Back soon</h1>", "", nil,
			"Content-Type", "text/html; charset=utf-8", "Retry-After", "120"))}},
		Route{PathRegex: re, Phases: []any{mustRespond(t, newAnswer(301, "", "https://$host/new/$rest$is_args$args", re))}},
		Route{Path: "/moved", Phases: []any{mustRespond(t, newAnswer(308, "", "/elsewhere", nil, "Cache-Control", "max-age=60"))}},
		Route{Path: "/gone", Phases: []any{mustRespond(t, newAnswer(204, "", "", nil))}},
		Route{Upstream: proxytest.Peer{P: &proxy.Peer{Addr: up.Addr()}}},
	)
	var log proxytest.Buffer
	addr := proxytest.Serve(t, &proxy.Server{Handler: tbl,
		ErrorLog:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(slog.NewTextHandler(&log, nil)),
	})
	tests := []struct {
		request string
		status  int
		body    string
		fields  map[string]string
	}{
		{"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n", 200, "ok\n", map[string]string{"Content-Type": "text/plain; charset=utf-8", "Content-Length": "3"}},
		{"GET /down/x HTTP/1.1\r\nHost: h\r\n\r\n", 503, "<h1>Back soon</h1>", map[string]string{"Content-Type": "text/html; charset=utf-8", "Retry-After": "120"}},
		{"GET /old/a/b?q=1 HTTP/1.1\r\nHost: Shop.Example:8080\r\n\r\n", 301, "", map[string]string{"Location": "https://shop.example/new/a/b?q=1", "Content-Length": "0"}},
		{"GET /old/ HTTP/1.1\r\nHost: shop.example\r\n\r\n", 301, "", map[string]string{"Location": "https://shop.example/new/"}},
		{"POST /moved HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi", 308, "", map[string]string{"Location": "/elsewhere", "Cache-Control": "max-age=60"}},
		{"GET /gone HTTP/1.1\r\nHost: h\r\n\r\n", 204, "", map[string]string{"Content-Length": ""}},
	}
	for _, tt := range tests {
		resp, body := proxytest.Do(t, addr, tt.request)
		if resp.StatusCode != tt.status || body != tt.body {
			t.Errorf("%q: %d %q, want %d %q", tt.request, resp.StatusCode, body, tt.status, tt.body)
		}
		for k, v := range tt.fields {
			if got := strings.Join(resp.Header.Values(k), ","); got != v {
				t.Errorf("%q: %s %q, want %q", tt.request, k, got, v)
			}
		}
	}
	// HEAD: the same head, no body.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	io.WriteString(nc, "HEAD /healthz HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	raw, _ := io.ReadAll(nc)
	if head := string(raw); !strings.HasPrefix(head, "HTTP/1.1 200 OK\r\n") || !strings.Contains(head, "\r\nContent-Length: 3\r\n") || !strings.HasSuffix(head, "\r\n\r\n") {
		t.Errorf("HEAD: %q", head)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	wait.For(t, "the access log lines", func() bool { return strings.Count(log.String(), "\n") == len(tests)+1 })
	if strings.Contains(log.String(), "upstream=") {
		t.Errorf("access log names an upstream:\n%s", log.String())
	}
}

func TestNewRespondErrors(t *testing.T) {
	re := regexp.MustCompile(`^/(a)`)
	for _, tt := range []struct {
		a   Answer
		msg string
	}{
		{newAnswer(199, "", "", nil), "status 199: want 200 to 599"},
		{newAnswer(600, "", "", nil), "status 600"},
		{newAnswer(204, "x", "", nil), "a 204 has no body"},
		{newAnswer(304, "x", "", nil), "a 304 has no body"},
		{newAnswer(200, "", "/x", nil), "a location goes with a redirect (301, 302, 303, 307, 308) or 201, not 200"},
		{newAnswer(302, "", "/$2", re), "location: at 1: $2 refers to capture 2"},
		{newAnswer(302, "", "/x", nil, "Location", "/y"), "Location is given twice"},
	} {
		if _, err := NewRespond(tt.a); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("NewRespond(%+v): %v, want ...%s...", tt.a, err, tt.msg)
		}
	}
	// A literal location is worked out once: the answer is shared.
	p := mustRespond(t, newAnswer(301, "", "/x$$", nil))
	s := session(t, "h", "/")
	if a, b := p.RequestFilter(s), p.RequestFilter(s); a != b || string(a.Header.Get("Location")) != "/x$" {
		t.Errorf("a literal location: %v %v", a, b)
	}
	var h h1.Header
	h.Add("X-A", "1")
	if got := mustRespond(t, Answer{Status: 200, Header: h}).RequestFilter(s); got.Header.Has("Content-Type") {
		t.Error("an answer without a body was given a Content-Type")
	}
}
