package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/observe"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/upstream"
)

// testGeneration is a generation of two upstreams: web (routed) with two
// servers, and spare (not routed) with one server.
func testGeneration() *config.Generation {
	cfg := &config.Config{
		Routes: []config.Route{{Upstream: "web"}},
		Upstreams: []*config.Upstream{
			{Name: "web", Servers: []config.Server{{Address: "127.0.0.1:9001"}, {Address: "[::1]:9002"}}},
			{Name: "spare", Servers: []config.Server{{Address: "127.0.0.1:9003"}, {Address: "unix:/run/app.sock"}}},
		},
	}
	opts := balance.Options{MaxFails: -1, ConsecutiveFailures: -1}
	return &config.Generation{Config: cfg, Upstreams: map[string]*upstream.Group{
		"web":   upstream.New("web", []*balance.Server{{Addr: "127.0.0.1:9001"}, {Addr: "[::1]:9002"}}, nil, opts, nil),
		"spare": upstream.New("spare", []*balance.Server{{Addr: "127.0.0.1:9003"}, {Addr: "unix:/run/app.sock"}}, nil, opts, nil),
	}}
}

func do(t *testing.T, h http.Handler, method, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	var body map[string]any
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s %s: %v in %q", method, path, err, rec.Body)
		}
	}
	return rec.Code, body
}

func TestLiveAndReady(t *testing.T) {
	gen := testGeneration()
	var current *config.Generation
	a := &Server{Generation: func() *config.Generation { return current }}
	h := a.Handler()
	if code, _ := do(t, h, "GET", "/live"); code != 200 {
		t.Fatalf("/live: %d", code)
	}
	reasons := func() string {
		code, body := do(t, h, "GET", "/ready")
		if code == 200 {
			return ""
		}
		if code != 503 || body["ready"] != false {
			t.Fatalf("/ready: %d %v", code, body)
		}
		var rs []string
		for _, r := range body["reasons"].([]any) {
			rs = append(rs, r.(string))
		}
		return strings.Join(rs, "; ")
	}
	if got := reasons(); got != "listeners not open; no config loaded" {
		t.Fatalf("before start: %q", got)
	}
	a.SetListening(true)
	current = gen
	if got := reasons(); got != "" {
		t.Fatalf("serving: %q", got)
	}
	web := gen.Upstreams["web"].Balancer()
	web.Drain("127.0.0.1:9001")
	if got := reasons(); got != "" {
		t.Fatalf("one of two servers drained: %q", got)
	}
	web.Drain("[::1]:9002")
	gen.Upstreams["spare"].Balancer().Drain("127.0.0.1:9003") // not routed: does not count
	if got := reasons(); got != "upstream web: no server takes requests (0 unhealthy, 2 drained)" {
		t.Fatalf("every server of web drained: %q", got)
	}
}

func TestDrainAndEnable(t *testing.T) {
	gen := testGeneration()
	a := &Server{Generation: func() *config.Generation { return gen }}
	h := a.Handler()
	tests := []struct {
		method, path string
		code         int
		errPart      string
	}{
		{"POST", "/api/upstreams/web/servers/%5B%3A%3A1%5D%3A9002/drain", 200, ""},
		{"POST", "/api/upstreams/web/servers/127.0.0.1:9001/drain", 200, ""},
		{"POST", "/api/upstreams/web/servers/127.0.0.1:9001/enable", 200, ""},
		{"GET", "/api/upstreams/web/servers/127.0.0.1:9001/drain", 405, "takes POST"},
		{"PUT", "/api/upstreams/web/servers/127.0.0.1:9001/enable", 405, "takes POST"},
		{"POST", "/api/upstreams/nope/servers/127.0.0.1:9001/drain", 404, `no upstream named "nope"`},
		{"POST", "/api/upstreams/web/servers/127.0.0.1:9999/drain", 404, `has no server "127.0.0.1:9999"`},
		{"POST", "/api/upstreams/web/servers/127.0.0.1:9001/pause", 404, "no such action"},
		// One path segment, percent-encoded: unix:/run/app.sock.
		{"POST", "/api/upstreams/web/servers/unix:%2Frun%2Fapp.sock/drain", 404, `has no server "unix:/run/app.sock"`},
		{"POST", "/api/upstreams/spare/servers/unix:%2Frun%2Fapp.sock/drain", 200, ""},
		{"GET", "/api/nothing", 404, "no such endpoint"},
	}
	for _, tt := range tests {
		code, body := do(t, h, tt.method, tt.path)
		if code != tt.code {
			t.Errorf("%s %s: %d %v, want %d", tt.method, tt.path, code, body, tt.code)
			continue
		}
		if tt.errPart != "" {
			if msg, _ := body["error"].(string); !strings.Contains(msg, tt.errPart) {
				t.Errorf("%s %s: error %q, want it to say %q", tt.method, tt.path, msg, tt.errPart)
			}
		}
	}
	ss := gen.Upstreams["web"].Balancer().Servers()
	if ss[0].Drained() || !ss[1].Drained() {
		t.Fatalf("drained: %v %v, want [::1]:9002 only", ss[0].Drained(), ss[1].Drained())
	}
	if spare := gen.Upstreams["spare"].Balancer().Servers(); spare[0].Drained() || !spare[1].Drained() {
		t.Errorf("spare drained: %v %v, want the Unix socket server only", spare[0].Drained(), spare[1].Drained())
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/upstreams/web/servers/127.0.0.1:9001/drain", nil))
	if rec.Header().Get("Allow") != "POST" {
		t.Errorf("405 without Allow: POST")
	}
}

func TestUpstreamsSnapshot(t *testing.T) {
	gen := testGeneration()
	rec := observe.NewRecorder()
	a := &Server{Generation: func() *config.Generation { return gen }, Recorder: rec}
	a.SetConfig("abc", time.Unix(1700000000, 0))
	gen.Upstreams["web"].Balancer().Drain("[::1]:9002")
	peer := &proxy.Peer{Addr: "127.0.0.1:9001", Upstream: "web"}
	now := time.Now()
	for range 4 {
		rec.Try(&proxy.Attempt{Peer: peer, Start: now, Duration: time.Millisecond, Wait: time.Millisecond, Status: 200})
	}
	rec.Try(&proxy.Attempt{Peer: peer, Start: now, Err: &fault.Error{Kind: fault.ConnectRefused, Source: fault.Upstream, Retry: true}})

	code, _ := do(t, a.Handler(), "GET", "/api/upstreams")
	if code != 200 {
		t.Fatalf("/api/upstreams: %d", code)
	}
	s := a.Snapshot()
	if s.Config.Hash != "abc" || len(s.Upstreams) != 2 || s.Upstreams[0].Name != "web" || !s.Upstreams[0].Routed || s.Upstreams[1].Routed {
		t.Fatalf("snapshot %+v", s)
	}
	web := s.Upstreams[0]
	if web.Available != 1 || len(web.Servers) != 2 {
		t.Fatalf("web: %d available of %d", web.Available, len(web.Servers))
	}
	tcp, sock := web.Servers[0], web.Servers[1]
	if tcp.Tries != 5 || tcp.Failures != 1 || tcp.Retries != 1 || tcp.Reasons["connect_refused"] != 1 || len(tcp.Recent) != 1 {
		t.Errorf("127.0.0.1:9001: %+v", tcp.Snapshot)
	}
	if tcp.Recent[0].ProxyStatus != "sluice; error=connection_refused" {
		t.Errorf("Proxy-Status %q", tcp.Recent[0].ProxyStatus)
	}
	if !sock.Drained || sock.Address != "[::1]:9002" || sock.Tries != 0 {
		t.Errorf("socket: %+v", sock)
	}
	if tcp.Condition != "healthy" || !tcp.Until.IsZero() || tcp.Reason != "" || tcp.State != "healthy" {
		t.Errorf("health of 127.0.0.1:9001: condition %q until %v reason %q state %q", tcp.Condition, tcp.Until, tcp.Reason, tcp.State)
	}
	// Until is left out of the JSON of a server that is not held out.
	rr := httptest.NewRecorder()
	a.Handler().ServeHTTP(rr, httptest.NewRequest("GET", "/api/upstreams", nil))
	if body := rr.Body.String(); strings.Contains(body, `"until"`) || !strings.Contains(body, `"condition": "healthy"`) {
		t.Errorf("/api/upstreams: until present or condition missing:\n%s", body)
	}
}

func TestStatusPageIsSelfContained(t *testing.T) {
	h := (&Server{}).Handler()
	for _, path := range []string{"/status", "/status/status.js", "/status/status.css"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != 200 || len(body) == 0 {
			t.Fatalf("%s: %d, %d bytes", path, rec.Code, len(body))
		}
		// Nothing from elsewhere: no scheme-qualified or protocol-relative
		// URL in src or href, no import.
		for _, bad := range []string{`src="http`, `href="http`, `src="//`, `href="//`, "@import", "url(http"} {
			if strings.Contains(string(body), bad) {
				t.Errorf("%s loads from elsewhere: %s", path, bad)
			}
		}
	}
}

func TestPprofOnlyWhenAsked(t *testing.T) {
	if code, _ := do(t, (&Server{}).Handler(), "GET", "/debug/pprof/"); code != 404 {
		t.Errorf("pprof off: %d", code)
	}
	if code, _ := do(t, (&Server{Pprof: true}).Handler(), "GET", "/debug/pprof/"); code != 200 {
		t.Errorf("pprof on: %d", code)
	}
}
