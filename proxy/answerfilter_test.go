package proxy

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// securing adds a header to every answer sluice makes itself, and answers
// /own with a Response it shares between requests.
type securing struct {
	*rotate
	shared *Response
}

func (h *securing) RequestFilter(s *Session) *Response {
	switch string(s.Request.Path()) {
	case "/own":
		return h.shared
	case "/denied":
		return s.ErrorResponse(&fault.Error{Kind: fault.Denied, Source: fault.Downstream})
	}
	return nil
}

func (h *securing) AnswerFilter(s *Session, resp *h1.Response) {
	resp.Header.Add("X-Frame-Options", "DENY")
	resp.Header.Del("X-Remove-Me")
	resp.Header.Set("Content-Length", "12345") // sluice's own: ignored
	resp.Status = 299                          // ignored
}

// TestAnswerFilter checks that AnswerFilter sees the answers sluice makes
// itself (an error's, a RequestFilter's, a denial), on a copy (a shared
// Response is not changed), and not the upstream's responses; and that the
// framing stays sluice's.
func TestAnswerFilter(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("upstream"))
	shared := Text(200, "own answer\n")
	shared.Header.Add("X-Remove-Me", "1")
	h := &securing{rotate: peers(testOptions(), up.Addr()), shared: shared}
	hs := start(t, h)
	dead := &securing{rotate: peers(testOptions(), upstreamtest.Dead(t))}
	hsDead := start(t, dead)
	tests := []struct {
		hs     *harness
		path   string
		status int
		header string // X-Frame-Options
		ps     string // in Proxy-Status
	}{
		{hs, "/own", 200, "DENY", ""},
		{hs, "/own", 200, "DENY", ""}, // once, not twice: the shared Response is unchanged
		{hs, "/denied", 403, "DENY", "error=http_request_denied"},
		{hs, "/up", 200, "", ""},
		{hsDead, "/up", 502, "DENY", "error=connection_refused"},
	}
	for _, tt := range tests {
		resp, body := tt.hs.do(t, "GET "+tt.path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		if resp.StatusCode != tt.status || strings.Join(resp.Header.Values("X-Frame-Options"), ",") != tt.header ||
			!strings.Contains(resp.Header.Get("Proxy-Status"), tt.ps) || resp.Header.Get("X-Remove-Me") != "" {
			t.Errorf("GET %s: %d %v, want %d with X-Frame-Options %q and Proxy-Status %q", tt.path, resp.StatusCode, resp.Header, tt.status, tt.header, tt.ps)
		}
		if tt.path == "/own" && (body != "own answer\n" || resp.ContentLength != int64(len(body))) {
			t.Errorf("GET /own: body %q, Content-Length %d", body, resp.ContentLength)
		}
	}
	if shared.Header.Len() != 2 || shared.Header.Has("X-Frame-Options") {
		t.Errorf("the shared Response was changed: %s", shared.Header.String())
	}
}

// TestAnswerFilterH2 checks the same for an HTTP/2 client: the fields the
// hook adds reach it (lower-cased, as HTTP/2 has them).
func TestAnswerFilterH2(t *testing.T) {
	h := &securing{rotate: peers(testOptions(), upstreamtest.Dead(t)), shared: Text(200, "own\n")}
	hs, client := startH2(t, h, h2c())
	for _, path := range []string{"/own", "/denied", "/up"} {
		resp, err := client.Get("http://" + hs.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s over %s: %d %v, want X-Frame-Options", path, resp.Proto, resp.StatusCode, resp.Header)
		}
	}
}
