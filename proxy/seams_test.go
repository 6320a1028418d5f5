package proxy

import (
	"strings"
	"sync"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// intercepting is a phased Handler with an UpstreamResponseFilter.
type intercepting struct {
	*phased
	upstream func(s *Session, resp *h1.Response) *Response
}

func (h *intercepting) UpstreamResponseFilter(s *Session, _ *Peer, resp *h1.Response) *Response {
	return h.upstream(s, resp)
}

// TestUpstreamResponseFilter: a phase that sees the upstream's response
// head may answer instead: with a Response standing in for an upstream's,
// which the response phases see (a stored copy a 304 validated), the
// upstream's connection kept since the 304 has no body; or with sluice's
// own answer for a 500 whose body is never read, its connection closed.
// The tees, which never saw the upstream's response, are told it did not
// come; the access log has the upstream's status.
func TestUpstreamResponseFilter(t *testing.T) {
	for _, tt := range []struct {
		name     string
		up       string
		wantBody string
		wantIdle int
	}{
		{"304 replaced by a stored copy", "HTTP/1.1 304 Not Modified\r\nETag: \"1\"\r\n\r\n", "hello from the store", 1},
		{"500 replaced by sluice's answer", "HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\nboom!", "sorry\n", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := upstreamtest.Start(t, upstreamtest.Raw(tt.up))
			tee := newTee()
			var saw int
			h := &intercepting{
				phased: &phased{rotate: peers(testOptions(), up.Addr()),
					request:  func(s *Session) *Response { s.Tee(tee, false); return nil },
					response: func(_ *Session, resp *h1.Response) { resp.Header.Add("X-Filtered", "yes") }},
				upstream: func(s *Session, resp *h1.Response) *Response {
					saw = resp.Status
					if resp.Status == 304 {
						return stored()
					}
					return Text(503, "sorry\n")
				},
			}
			hs := start(t, h)
			resp, body := hs.do(t, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			if body != tt.wantBody {
				t.Fatalf("%d %q, want %q", resp.StatusCode, body, tt.wantBody)
			}
			if saw == 304 && (resp.StatusCode != 200 || resp.Header.Get("X-Filtered") != "yes" || resp.Trailer.Get("X-Digest") != "abc") {
				t.Errorf("the stand-in went to the client as %d %v, trailers %v", resp.StatusCode, resp.Header, resp.Trailer)
			}
			if saw == 500 && (resp.StatusCode != 503 || resp.Header.Get("X-Filtered") != "") {
				t.Errorf("sluice's own answer went as %d %v", resp.StatusCode, resp.Header)
			}
			if _, _, _, ended := tee.result(); ended != "abort" {
				t.Errorf("the tee was told %q, want abort", ended)
			}
			wait.For(t, "the access log line", func() bool { return strings.Contains(hs.access.String(), "upstream_status=") })
			if line := hs.access.String(); !strings.Contains(line, "upstream_status="+map[int]string{304: "304", 500: "500"}[saw]) {
				t.Errorf("access log %q", line)
			}
			if idle := hs.srv.Pool.Stats().Idle; idle != tt.wantIdle {
				t.Errorf("%d idle upstream connections, want %d", idle, tt.wantIdle)
			}
		})
	}
}

// TestSpawn: a phase spawns a request that runs through the main line as
// any other (its hooks see it, Spawned says so), reaches the upstream, and
// has its response seen by a tee only; the client's own request is
// answered meanwhile. Values a phase keeps on a session are its own and
// do not outlive the request.
func TestSpawn(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	tee := newTee()
	var mu sync.Mutex
	var spawnedSaw []string
	type key struct{}
	h := &phased{rotate: peers(testOptions(), up.Addr()), request: func(s *Session) *Response {
		if s.Value(key{}) != nil && !s.Spawned() {
			t.Errorf("a value of an earlier request: %v", s.Value(key{}))
		}
		if s.Spawned() {
			mu.Lock()
			spawnedSaw = append(spawnedSaw, string(s.Request.Target()), s.Value(key{}).(string))
			mu.Unlock()
			return nil
		}
		s.SetValue(key{}, "parent")
		if string(s.Request.Target()) == "/spawn" {
			var req h1.Request
			req.CopyFrom(&s.Request)
			req.SetTarget("/background")
			if !s.Spawn(&req, func(sub *Session) {
				sub.SetValue(key{}, "prepared")
				sub.Tee(tee, true)
			}) {
				t.Error("Spawn refused while serving")
			}
		}
		return nil
	}}
	hs := start(t, h)
	if st, _ := hs.get(t, "/spawn"); st != 200 {
		t.Fatalf("the client's own request: %d", st)
	}
	status, _, _, ended := tee.result()
	if status != 200 || ended != "end" {
		t.Fatalf("the spawned request's tee saw %d, %q", status, ended)
	}
	mu.Lock()
	got := strings.Join(spawnedSaw, " ")
	mu.Unlock()
	if got != "/background prepared" {
		t.Errorf("the spawned request's filter saw %q", got)
	}
	if st, _ := hs.get(t, "/again"); st != 200 {
		t.Fatalf("a later request: %d", st)
	}
	var targets []string
	for _, r := range up.Requests() {
		targets = append(targets, r.Target)
	}
	if strings.Join(targets, " ") != "/spawn /background /again" && strings.Join(targets, " ") != "/background /spawn /again" {
		t.Errorf("the upstream got %v", targets)
	}
}
