package route

import (
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/retry"
)

func TestRewriteTargets(t *testing.T) {
	tests := []struct {
		re, to, target, want string // want "": not rewritten
	}{
		{`^/old/(.*)$`, "/new/$1", "/old/a/b", "/new/a/b"},
		{`^/old/(.*)$`, "/new/$1", "/old/a?q=1&r=2", "/new/a?q=1&r=2"}, // the query kept
		{`^/old/(.*)$`, "/new/$1", "/old/?q", "/new/?q"},
		{`^/old/(.*)$`, "/new/$1", "/other/old/a", ""}, // no match: as it came
		{`^/old/(.*)$`, "/new/$1", "/old", ""},
		{`/old/`, "/new", "/x/old/y?z", "/new?z"},                         // the whole path replaced
		{`^/s/(.*)$`, "/search?q=$1", "/s/cats?page=2", "/search?q=cats"}, // the replacement's query wins
		{`^/s/(.*)$`, "/search?q=$1&$args", "/s/cats?page=2", "/search?q=cats&page=2"},
		{`^/s/(.*)$`, "/search/$1?", "/s/cats?page=2", "/search/cats"}, // a final ? drops it
		{`^/s/(.*)$`, "/search/$1?", "/s/cats", "/search/cats"},
		{`^/api/v(?P<v>[0-9]+)/(.*)`, "/$2?version=$v", "/api/v2/users", "/users?version=2"},
		{`(?i)^/IMG/(.*)`, "/images/$1", "/img/a.png", "/images/a.png"},
		{`^/a(b)?`, "/x$1y", "/a", "/xy"},
		{`\?`, "/never", "/a?b", ""}, // matched against the path only
	}
	for _, tt := range tests {
		rw, err := NewRewrite(regexp.MustCompile(tt.re), tt.to)
		if err != nil {
			t.Fatalf("NewRewrite(%q, %q): %v", tt.re, tt.to, err)
		}
		s := session(t, "h", tt.target)
		var req h1.Request
		req.CopyFrom(&s.Request)
		rw.UpstreamRequestFilter(s, nil, &req)
		want := tt.want
		if want == "" {
			want = tt.target
		}
		if got := string(req.Target()); got != want {
			t.Errorf("%s -> %s on %s: %q, want %q", tt.re, tt.to, tt.target, got, want)
		}
		rw.RequestFilter(s)
		if notes := s.Notes(); (len(notes) == 1) != (tt.want != "") || len(notes) == 1 && (notes[0].Key != "rewritten" || notes[0].Value.String() != tt.want) {
			t.Errorf("%s on %s: notes %v", tt.re, tt.target, notes)
		}
		if got := string(s.Request.Target()); got != tt.target {
			t.Errorf("the session's request was changed to %q", got)
		}
	}
}

func TestNewRewriteErrors(t *testing.T) {
	for _, tt := range []struct{ re, to, msg string }{
		{`^/(a)`, "new/$1", `must start with "/"`},
		{`^/(a)`, "$1/x", `must start with "/"`},
		{`^/(a)`, "/x#top", "fragment"},
		{`^/(a)`, "/$2", "refers to capture 2"},
	} {
		if _, err := NewRewrite(regexp.MustCompile(tt.re), tt.to); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("NewRewrite(%q, %q): %v, want ...%s...", tt.re, tt.to, err, tt.msg)
		}
	}
	if _, err := NewRewrite(nil, "/x"); err == nil {
		t.Error("NewRewrite without an expression succeeded")
	}
}

// TestRewriteRoute checks a rewrite on a route matched by its own
// expression, on the wire: every try sends the rewritten path (the first
// server reads the request and resets, the GET is retried on the second),
// the access log keeps the client's target and ends with rewritten=.
func TestRewriteRoute(t *testing.T) {
	first := upstreamtest.Start(t, upstreamtest.ResetAfterRead())
	second := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) { c.Respond(200, r.Target) })
	opts := &proxy.PeerOptions{Retry: &retry.Policy{Tries: 2, On: retry.OnError}}
	re := regexp.MustCompile(`^/api/v([0-9]+)/(.*)$`)
	rw, err := NewRewrite(re, "/$2?api_version=$1")
	if err != nil {
		t.Fatal(err)
	}
	tbl := New(Route{PathRegex: re, Name: "api", Phases: []any{rw},
		Upstream: proxytest.Untried{{Addr: first.Addr(), Options: opts}, {Addr: second.Addr(), Options: opts}}})
	var log proxytest.Buffer
	addr := proxytest.Serve(t, &proxy.Server{Handler: tbl,
		ErrorLog:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(slog.NewTextHandler(&log, nil)),
	})
	status, body := proxytest.Get(t, addr, "/api/v2/users?page=3", "")
	if status != 200 || body != "/users?api_version=2" {
		t.Fatalf("got %d %q, want 200 /users?api_version=2", status, body)
	}
	if reqs := first.Requests(); len(reqs) != 1 || reqs[0].Target != "/users?api_version=2" {
		t.Errorf("the first server got %v", reqs)
	}
	wait.For(t, "the access log line", func() bool { return strings.Count(log.String(), "\n") == 1 })
	if line := log.String(); !strings.Contains(line, `target="/api/v2/users?page=3"`) || !strings.Contains(line, "tries=2") ||
		!strings.HasSuffix(strings.TrimSpace(line), ` rewritten="/users?api_version=2"`) || !strings.Contains(line, `route=*~^/api/v([0-9]+)/(.*)$`) {
		t.Errorf("access log %q: want the client's target, tries=2, the route and rewritten=", line)
	}
}
