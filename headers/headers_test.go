package headers

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/retry"
	"github.com/sluice-proxy/sluice/route"
)

func TestRulesApply(t *testing.T) {
	var h h1.Header
	h.Add("Server", "gunicorn")
	h.Add("x-debug", "1")
	h.Add("Cache-Control", "public")
	h.Add("X-Debug", "2")
	h.Add("Vary", "Cookie")
	r := Rules{
		Remove: []string{"X-Debug", "Server"},
		Set:    []Field{{"cache-control", "no-store"}, {"X-Frame-Options", "DENY"}},
		Add:    []Field{{"Vary", "Accept-Encoding"}, {"X-Debug", "added after the remove"}},
	}
	r.Apply(&h)
	want := "Cache-Control: no-store\r\nVary: Cookie\r\nX-Frame-Options: DENY\r\nVary: Accept-Encoding\r\nX-Debug: added after the remove\r\n"
	if got := h.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		req, resp Rules
		want      string // in the error; "" = accepted
	}{
		{Rules{Set: []Field{{"X-Env", "prod"}}}, Rules{Remove: []string{"Server"}}, ""},
		{Rules{Set: []Field{{"Content-Length", "1"}}}, Rules{}, "frames the body"},
		{Rules{}, Rules{Remove: []string{"transfer-encoding"}}, "frames the body"},
		{Rules{Add: []Field{{"Connection", "close"}}}, Rules{}, "hop-by-hop"},
		{Rules{Remove: []string{"Host"}}, Rules{}, "routed by"},
		{Rules{}, Rules{Set: []Field{{"Host", "x"}}}, ""}, // a response's Host is nobody's business
		{Rules{Set: []Field{{"X Bad", "1"}}}, Rules{}, "not a valid field name"},
		{Rules{Set: []Field{{"X-A", "a\r\nInjected: 1"}}}, Rules{}, "must not hold"},
		{Rules{}, Rules{Add: []Field{{"X-A", "a\x00"}}}, "must not hold"},
		{Rules{}, Rules{Add: []Field{{"X-A", " a"}}}, "whitespace"},
		{Rules{Set: []Field{{"", "a"}}}, Rules{}, "empty"},
	}
	for _, tt := range tests {
		_, err := New(tt.req, tt.resp)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v %+v: %v", tt.req, tt.resp, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v %+v: %v, want an error saying %q", tt.req, tt.resp, err, tt.want)
		}
	}
}

// TestHeadersOverSockets checks the phase in a route: request rules on
// every try (the first server resets, the retry carries them too),
// response rules on the upstream's response and on sluice's own 502.
func TestHeadersOverSockets(t *testing.T) {
	first := upstreamtest.Start(t, upstreamtest.ResetAfterRead())
	second := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Respond(200, r.Get("X-Env")+" "+r.Get("X-Debug"), upstreamtest.Field{Name: "Server", Value: "gunicorn"})
	})
	opts := &proxy.PeerOptions{Retry: &retry.Policy{Tries: 2, On: retry.OnError}}
	p, err := New(
		Rules{Set: []Field{{"X-Env", "prod"}}, Remove: []string{"X-Debug"}},
		Rules{Set: []Field{{"Strict-Transport-Security", "max-age=31536000"}}, Remove: []string{"Server"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	tbl := route.New(
		route.Route{PathPrefix: "/ok", Name: "ok", Phases: []any{p},
			Upstream: proxytest.Untried{{Addr: first.Addr(), Options: opts}, {Addr: second.Addr(), Options: opts}}},
		route.Route{PathPrefix: "/down", Name: "down", Phases: []any{p},
			Upstream: proxytest.Untried{{Addr: upstreamtest.Dead(t), Options: opts}}},
	)
	addr := proxytest.Serve(t, &proxy.Server{Handler: tbl, ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))})

	resp, body := proxytest.Do(t, addr, "GET /ok HTTP/1.1\r\nHost: h\r\nX-Env: dev\r\nX-Debug: 1\r\n\r\n")
	if resp.StatusCode != 200 || body != "prod " {
		t.Errorf("GET /ok: %d %q, want 200 with the upstream seeing X-Env prod and no X-Debug", resp.StatusCode, body)
	}
	if reqs := first.Requests(); len(reqs) != 1 || reqs[0].Get("X-Env") != "prod" || reqs[0].Get("X-Debug") != "" {
		t.Errorf("the first try carried %v", reqs)
	}
	if resp.Header.Get("Strict-Transport-Security") != "max-age=31536000" || resp.Header.Get("Server") != "" {
		t.Errorf("GET /ok: response header %v", resp.Header)
	}
	resp, _ = proxytest.Do(t, addr, "GET /down HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp.StatusCode != 502 || resp.Header.Get("Strict-Transport-Security") != "max-age=31536000" {
		t.Errorf("GET /down: %d %v, want sluice's 502 with the response rules", resp.StatusCode, resp.Header)
	}
	// No route: no route's rules.
	resp, _ = proxytest.Do(t, addr, "GET /none HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp.StatusCode != 404 || resp.Header.Get("Strict-Transport-Security") != "" {
		t.Errorf("GET /none: %d %v, want a bare 404", resp.StatusCode, resp.Header)
	}
}
