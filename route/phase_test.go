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
)

// stripPrefix is a phase of each kind: it rewrites the path before the
// route is used again, marks the upstream head, and marks the response.
type stripPrefix struct{ prefix string }

func (p stripPrefix) RequestFilter(s *proxy.Session) *proxy.Response {
	if rest, ok := strings.CutPrefix(string(s.Request.Target()), p.prefix); ok {
		s.Request.SetTarget("/" + rest)
		s.Note("stripped", p.prefix)
	}
	return nil
}

func (p stripPrefix) UpstreamRequestFilter(s *proxy.Session, _ *proxy.Peer, req *h1.Request) {
	req.Header.Add("X-Phase", "upstream")
}

func (p stripPrefix) ResponseFilter(s *proxy.Session, _ *proxy.Peer, resp *h1.Response) {
	resp.Header.Add("X-Phase", "response")
}

// answer answers every request itself.
type answer string

func (a answer) RequestFilter(s *proxy.Session) *proxy.Response { return proxy.Text(200, string(a)) }

// TestPhases checks that a route's phases run for the requests it matches,
// in order, and that the route a request matched stays its route after a
// phase rewrote its path (a re-match of "/x" would find the default route).
func TestPhases(t *testing.T) {
	api := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Respond(200, "api "+r.Target+" "+r.Get("X-Phase"))
	})
	other := upstreamtest.Start(t, upstreamtest.OK("default"))
	tbl := New(
		Route{PathPrefix: "/api/", Name: "api", Upstream: proxytest.Peer{P: &proxy.Peer{Addr: api.Addr()}},
			Phases: []any{stripPrefix{"/api/"}, "not a phase"}},
		Route{PathPrefix: "/static/", Name: "static", Phases: []any{answer("first"), answer("second")}},
		Route{PathPrefix: "/none/", Name: "none"},
		Route{Name: "default", Upstream: proxytest.Peer{P: &proxy.Peer{Addr: other.Addr()}}},
	)
	var log proxytest.Buffer
	addr := proxytest.Serve(t, &proxy.Server{Handler: tbl,
		ErrorLog:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(slog.NewTextHandler(&log, nil)),
	})
	tests := []struct {
		path   string
		status int
		body   string
		phase  string
	}{
		{"/api/x", 200, "api /x upstream", "response"},
		{"/static/a.css", 200, "first", ""},
		{"/none/x", 503, "", ""},
		{"/x", 200, "default", ""},
	}
	for _, tt := range tests {
		resp, body := proxytest.Do(t, addr, "GET "+tt.path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		if resp.StatusCode != tt.status || (tt.body != "" && body != tt.body) || resp.Header.Get("X-Phase") != tt.phase {
			t.Errorf("GET %s: %d %q X-Phase %q, want %d %q %q", tt.path, resp.StatusCode, body, resp.Header.Get("X-Phase"), tt.status, tt.body, tt.phase)
		}
	}
	// The phase's note ends the request's access log line, and only its.
	wait.For(t, "four access log lines", func() bool { return strings.Count(log.String(), "\n") == 4 })
	// Each line is written once its request is answered: in any order.
	for i, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if noted := strings.HasSuffix(line, " stripped=/api/"); noted != strings.Contains(line, "upstream="+api.Addr()) {
			t.Errorf("access log line %d %q: noted %v", i, line, noted)
		}
	}
}
