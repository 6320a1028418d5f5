package proxy

import (
	"io"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/retry"
)

// idPattern is an id sluice makes: 32 hex digits.
var idPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// accessLine waits for the access log line with status and returns it.
func accessLine(t *testing.T, hs *harness, status string) string {
	t.Helper()
	var line string
	wait.For(t, "the access log line with status="+status, func() bool {
		for _, l := range strings.Split(hs.access.String(), "\n") {
			if strings.Contains(l, " status="+status+" ") {
				line = l
				return true
			}
		}
		return false
	})
	return line
}

// TestAccessLogHeadErrors: the answers to heads sluice refuses (400, 408,
// 431, 505) are logged with a duration that was measured, not the
// largest one there is, and carry a request id like every answer.
func TestAccessLogHeadErrors(t *testing.T) {
	durationRe := regexp.MustCompile(` duration=(\d+)\.(\d{6}) `)
	for _, tt := range []struct {
		name, head string
		status     string
		atLeast    time.Duration
	}{
		{"malformed", "GET / HTTP/1.x\r\nHost: a\r\n\r\n", "400", 0},
		{"header timeout", "GET / HTTP/1.1\r\nHost: a\r\n", "408", 200 * time.Millisecond},
		{"head too large", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", "431", 0},
		{"version", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", "505", 0},
	} {
		t.Run(tt.status, func(t *testing.T) {
			up := upstreamtest.Start(t, nil)
			hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) { s.HeaderTimeout = 200 * time.Millisecond })
			c := hs.dial(t)
			c.send(tt.head)
			resp, _ := c.response("GET")
			if got := resp.Status[:3]; got != tt.status {
				t.Fatalf("status %s, want %s", got, tt.status)
			}
			id := resp.Header.Get(RequestIDHeader)
			if !idPattern.MatchString(id) {
				t.Errorf("%s answer's %s %q, want 32 hex digits", tt.status, RequestIDHeader, id)
			}
			line := accessLine(t, hs, tt.status)
			m := durationRe.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("no duration in seconds in %q", line)
			}
			d, _ := time.ParseDuration(m[1] + "." + m[2] + "s")
			if d < tt.atLeast || d > time.Minute {
				t.Errorf("duration %v in %q, want at least %v and well under a minute", d, line, tt.atLeast)
			}
			if !strings.Contains(line, " request_id="+id) {
				t.Errorf("access log line %q lacks request_id=%s", line, id)
			}
		})
	}
}

// TestRequestID: a request gets an id of sluice's, sent upstream, returned
// to the client and logged; a client's own X-Request-Id is replaced,
// unless the client is a trusted peer; an upstream's own in the response
// passes; sluice's own answers carry it; NoRequestID turns it all off.
func TestRequestID(t *testing.T) {
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Target == "/echo" {
			c.Respond(200, r.Get(RequestIDHeader), upstreamtest.Field{Name: RequestIDHeader, Value: "up-" + r.Get(RequestIDHeader)})
			return
		}
		c.Respond(200, r.Get(RequestIDHeader))
	})
	hs := start(t, peers(testOptions(), up.Addr()))

	resp, body := hs.do(t, "GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
	id := resp.Header.Get(RequestIDHeader)
	if !idPattern.MatchString(id) || body != id {
		t.Fatalf("id %q to the client, %q upstream; want the same 32 hex digits", id, body)
	}
	if n := len(resp.Header.Values(RequestIDHeader)); n != 1 {
		t.Errorf("%d %s fields in the response, want 1", n, RequestIDHeader)
	}
	if line := accessLine(t, hs, "200"); !strings.Contains(line, "request_id="+id) {
		t.Errorf("access log %q lacks request_id=%s", line, id)
	}
	resp2, _ := hs.do(t, "GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
	if id2 := resp2.Header.Get(RequestIDHeader); id2 == id || !idPattern.MatchString(id2) {
		t.Errorf("second request's id %q, first %q: want another", id2, id)
	}

	// An untrusted client's id is replaced, upstream and back.
	resp, body = hs.do(t, "GET /a HTTP/1.1\r\nHost: a\r\nX-Request-Id: mine\r\n\r\n")
	if got := resp.Header.Get(RequestIDHeader); got == "mine" || body != got || !idPattern.MatchString(got) {
		t.Errorf("untrusted client's id: %q back, %q upstream; want one of sluice's in both", got, body)
	}
	// The upstream's own passes unchanged.
	resp, body = hs.do(t, "GET /echo HTTP/1.1\r\nHost: a\r\n\r\n")
	if got := resp.Header.Values(RequestIDHeader); len(got) != 1 || got[0] != "up-"+body {
		t.Errorf("upstream's own id: got %q, want [up-%s]", got, body)
	}

	// A trusted peer's is kept.
	trusted := start(t, peers(testOptions(), up.Addr()), func(s *Server) {
		s.Forwarding.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	resp, body = trusted.do(t, "GET /a HTTP/1.1\r\nHost: a\r\nX-Request-Id: lb-42\r\n\r\n")
	if got := resp.Header.Get(RequestIDHeader); got != "lb-42" || body != "lb-42" {
		t.Errorf("trusted peer's id: %q back, %q upstream; want lb-42", got, body)
	}

	// sluice's own answer (502: nothing listens) carries one.
	bad := start(t, peers(withPolicy(&retry.Policy{Tries: 1}), upstreamtest.Dead(t)))
	resp, _ = bad.do(t, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if got := resp.Header.Get(RequestIDHeader); resp.StatusCode != 502 || !idPattern.MatchString(got) {
		t.Errorf("502: status %d, id %q", resp.StatusCode, got)
	}

	// Off: no field either way, no id in the log.
	off := start(t, peers(testOptions(), up.Addr()), func(s *Server) { s.Forwarding.NoRequestID = true })
	resp, body = off.do(t, "GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.Header.Get(RequestIDHeader) != "" || body != "" {
		t.Errorf("ids off: %q back, %q upstream", resp.Header.Get(RequestIDHeader), body)
	}
	if line := accessLine(t, off, "200"); strings.Contains(line, "request_id=") {
		t.Errorf("ids off, yet logged: %q", line)
	}
}

// TestAccessLogFields: host, user agent, referer, protocol, the upstream's
// name and the route are in the line, and the duration is in seconds.
func TestAccessLogFields(t *testing.T) {
	up := upstreamtest.Start(t, nil)
	h := &routed{peer: &Peer{Addr: up.Addr(), Upstream: "app", Options: testOptions()}}
	hs := start(t, h)
	hs.do(t, "GET /x?y HTTP/1.0\r\nHost: example.com\r\nUser-Agent: curl/8.0 (x)\r\nReferer: https://r.example/\r\n\r\n")
	line := accessLine(t, hs, "200")
	re := regexp.MustCompile(`^time=\S+ level=INFO msg=request client=127\.0\.0\.1 method=GET host=example\.com target=/x\?y status=200 ` +
		`bytes_in=0 bytes_out=\d+ duration=\d+\.\d{6} protocol=HTTP/1\.0 request_id=[0-9a-f]{32} route=test-route upstream_name=app ` +
		`upstream=` + regexp.QuoteMeta(up.Addr()) + ` upstream_status=200 reused=false tries=1 ` +
		`user_agent="curl/8\.0 \(x\)" referer=https://r\.example/$`)
	if !re.MatchString(line) {
		t.Errorf("access log line\n%s\ndoes not match\n%s", line, re)
	}
}

// routed is a Handler that names its route.
type routed struct{ peer *Peer }

func (h *routed) UpstreamPeer(s *Session) (*Peer, error) {
	s.SetRoute("test-route")
	return h.peer, nil
}

// TestRequestIDOverH2: an HTTP/2 client gets the id too, on an upstream's
// answer and on sluice's own.
func TestRequestIDOverH2(t *testing.T) {
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Respond(200, r.Get(RequestIDHeader))
	})
	for _, tt := range []struct {
		addr   string
		status int
	}{{up.Addr(), 200}, {upstreamtest.Dead(t), 502}} {
		hs, client := startH2(t, peers(withPolicy(&retry.Policy{Tries: 1}), tt.addr), h2c())
		resp, err := client.Get("http://" + hs.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		id := resp.Header.Get(RequestIDHeader)
		if resp.StatusCode != tt.status || resp.ProtoMajor != 2 || !idPattern.MatchString(id) {
			t.Errorf("HTTP/%d %d, id %q; want HTTP/2 %d with an id", resp.ProtoMajor, resp.StatusCode, id, tt.status)
		}
		if tt.status == 200 && string(body) != id {
			t.Errorf("id %q upstream, %q to the client", body, id)
		}
	}
}
