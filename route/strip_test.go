package route

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/retry"
)

func TestStripPrefixTargets(t *testing.T) {
	tests := []struct {
		prefix, target, want string // want "": not stripped
	}{
		{"/api/", "/api/x", "/x"},
		{"/api/", "/api/x/y?q=1&r=/api/", "/x/y?q=1&r=/api/"},
		{"/api/", "/api/", "/"},
		{"/api/", "/api/?q", "/?q"},
		{"/api/", "/apix", ""},
		{"/api/", "/other/api/x", ""},
		{"/api", "/api/x", "/x"},
		{"/api", "/api", "/"},
		{"/api", "/api?q=1", "/?q=1"},
		{"/api", "/apix", ""}, // not at a segment boundary
		{"/api", "/api.json", ""},
		{"/a/b", "/a/b/c", "/c"},
		{"/", "/x", "/x"},
		{"", "/x", ""},
	}
	for _, tt := range tests {
		p := StripPrefix{Prefix: tt.prefix}
		var req h1.Request
		if err := h1.ParseRequest(&req, []byte("GET "+tt.target+" HTTP/1.1\r\nHost: h\r\n\r\n"), 10); err != nil {
			t.Fatal(err)
		}
		var s proxy.Session
		p.UpstreamRequestFilter(&s, nil, &req)
		want := tt.want
		if want == "" {
			want = tt.target
		}
		if got := string(req.Target()); got != want {
			t.Errorf("prefix %q, target %q: upstream target %q, want %q", tt.prefix, tt.target, got, want)
		}
		if _, stripped := p.rest([]byte(tt.target)); stripped != (tt.want != "") {
			t.Errorf("prefix %q, target %q: stripped %v", tt.prefix, tt.target, stripped)
		}
	}
}

// TestStripPrefixRetried checks that the stripped path is what every try
// sends: the first server reads the request and resets the connection,
// the GET is retried on the second, and both got /x; the access log keeps
// the client's target and notes the strip.
func TestStripPrefixRetried(t *testing.T) {
	first := upstreamtest.Start(t, upstreamtest.ResetAfterRead())
	second := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) { c.Respond(200, r.Target) })
	opts := &proxy.PeerOptions{Retry: &retry.Policy{Tries: 2, On: retry.OnError}}
	tbl := New(Route{PathPrefix: "/api", Name: "api", Phases: []any{StripPrefix{Prefix: "/api"}},
		Upstream: proxytest.Untried{{Addr: first.Addr(), Options: opts}, {Addr: second.Addr(), Options: opts}}})
	var log proxytest.Buffer
	addr := proxytest.Serve(t, &proxy.Server{Handler: tbl,
		ErrorLog:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(slog.NewTextHandler(&log, nil)),
	})
	status, body := proxytest.Get(t, addr, "/api/x?q=1", "")
	if status != 200 || body != "/x?q=1" {
		t.Fatalf("got %d %q, want 200 /x?q=1", status, body)
	}
	if reqs := first.Requests(); len(reqs) != 1 || reqs[0].Target != "/x?q=1" {
		t.Errorf("the first server got %v", reqs)
	}
	wait.For(t, "the access log line", func() bool { return strings.Count(log.String(), "\n") == 1 })
	if line := log.String(); !strings.Contains(line, "target=\"/api/x?q=1\"") || !strings.Contains(line, "tries=2") ||
		!strings.HasSuffix(strings.TrimSpace(line), " stripped=/api") {
		t.Errorf("access log %q: want the client's target, tries=2 and stripped=/api", line)
	}
	// A path that only shares the prefix's letters goes as it came.
	if status, body := proxytest.Get(t, addr, "/apix", ""); status != 200 || body != "/apix" {
		t.Errorf("GET /apix: %d %q, want it sent as it came", status, body)
	}
}
