package errpage_test

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/access"
	"github.com/sluice-proxy/sluice/errpage"
	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/limit"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/route"
)

const html = "text/html; charset=utf-8"

func pages(t *testing.T, m map[int]string) *errpage.Pages {
	t.Helper()
	ps := map[int]errpage.Page{}
	for status, body := range m {
		ps[status] = errpage.Page{Body: []byte(body), ContentType: html}
	}
	p, err := errpage.New(ps)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNew(t *testing.T) {
	for _, tt := range []struct {
		pages map[int]errpage.Page
		msg   string
	}{
		{map[int]errpage.Page{399: {ContentType: html}}, "status 399: pages are for 400 to 599"},
		{map[int]errpage.Page{600: {ContentType: html}}, "status 600"},
		{map[int]errpage.Page{502: {}}, `status 502: Content-Type "" is not a field value`},
		{map[int]errpage.Page{502: {ContentType: "text/html\r\nX: y"}}, "is not a field value"},
	} {
		if _, err := errpage.New(tt.pages); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("New(%v): %v, want ...%s...", tt.pages, err, tt.msg)
		}
	}
	p := pages(t, map[int]string{503: "a", 404: "b"})
	if got := p.Statuses(); len(got) != 2 || got[0] != 404 || got[1] != 503 {
		t.Errorf("Statuses() = %v", got)
	}
}

// TestErrorPage checks that a page takes the place of the body only, and
// that the answer handed in is left as it was.
func TestErrorPage(t *testing.T) {
	p := pages(t, map[int]string{429: "<h1>slow down</h1>"})
	in := &proxy.Response{Status: 429, Body: []byte("429 Too Many Requests\n")}
	in.Header.Add("Content-Type", "text/plain; charset=utf-8")
	in.Header.Add("Retry-After", "3")
	in.Header.Add("Proxy-Status", "sluice; error=http_request_denied")
	var s proxy.Session
	out := p.ErrorPage(&s, in)
	if out == in || out.Status != 429 || string(out.Body) != "<h1>slow down</h1>" || string(out.Header.Get("Content-Type")) != html ||
		string(out.Header.Get("Retry-After")) != "3" || string(out.Header.Get("Proxy-Status")) != "sluice; error=http_request_denied" {
		t.Errorf("got %d %q %q", out.Status, out.Header.AppendTo(nil), out.Body)
	}
	if string(in.Body) != "429 Too Many Requests\n" || string(in.Header.Get("Content-Type")) != "text/plain; charset=utf-8" {
		t.Errorf("the answer handed in was changed: %q %q", in.Header.AppendTo(nil), in.Body)
	}
	other := &proxy.Response{Status: 403}
	if p.ErrorPage(&s, other) != other {
		t.Error("a status without a page was changed")
	}
	grpc := &proxy.Response{Status: 429}
	grpc.Header.Add("Grpc-Status", "14")
	if p.ErrorPage(&s, grpc) != grpc {
		t.Error("a gRPC answer was given a page")
	}
}

// TestPagesOnTheWire checks, through a route table on a real socket, which
// answers get pages: sluice's own (a 502 for a dead upstream, the route's
// 403 and 413, the 404 no route matches, with the table's pages), never
// an upstream's own 502, a respond's answer, a gRPC call's, and that the
// status and Proxy-Status stay.
func TestPagesOnTheWire(t *testing.T) {
	bad := upstreamtest.Start(t, upstreamtest.Status(502, "the upstream's own 502"))
	dead := proxytest.Peer{P: &proxy.Peer{Addr: upstreamtest.Dead(t)}}
	routePages := pages(t, map[int]string{502: "<h1>route 502</h1>", 403: "<h1>route 403</h1>", 413: "<h1>route 413</h1>", 503: "<h1>route 503</h1>"})
	maintenance, err := route.NewRespond(route.Answer{Status: 503, Body: []byte("maintenance")})
	if err != nil {
		t.Fatal(err)
	}
	tbl := route.New(
		route.Route{PathPrefix: "/dead", Upstream: dead, Phases: []any{routePages}},
		route.Route{PathPrefix: "/bad", Upstream: proxytest.Peer{P: &proxy.Peer{Addr: bad.Addr()}}, Phases: []any{routePages}},
		route.Route{PathPrefix: "/denied", Upstream: dead, Phases: []any{&access.List{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, routePages}},
		route.Route{PathPrefix: "/upload", Upstream: dead, Phases: []any{limit.Body{Max: 4}, routePages}},
		route.Route{PathPrefix: "/down", Phases: []any{maintenance, routePages}},
		route.Route{PathPrefix: "/plain", Upstream: dead},
	).WithUnmatched(pages(t, map[int]string{404: "<h1>no such page</h1>"}))
	addr := proxytest.Serve(t, &proxy.Server{Handler: tbl, ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))})
	tests := []struct {
		name, request string
		status        int
		body, ps      string // ps: the start of Proxy-Status, "" for none
	}{
		{"dead upstream", "GET /dead HTTP/1.1\r\nHost: h\r\n\r\n", 502, "<h1>route 502</h1>", "sluice; error=connection_refused"},
		{"upstream's own 502", "GET /bad HTTP/1.1\r\nHost: h\r\n\r\n", 502, "the upstream's own 502", ""},
		{"body over the limit", "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n12345", 413, "<h1>route 413</h1>", "sluice; error=http_request_error"},
		{"respond", "GET /down HTTP/1.1\r\nHost: h\r\n\r\n", 503, "maintenance", ""},
		{"no route", "GET /nowhere HTTP/1.1\r\nHost: h\r\n\r\n", 404, "<h1>no such page</h1>", "sluice; error=destination_not_found"},
		{"route without pages", "GET /plain HTTP/1.1\r\nHost: h\r\n\r\n", 502, "502 Bad Gateway (connection_refused)\n", "sluice; error=connection_refused"},
	}
	for _, tt := range tests {
		resp, body := proxytest.Do(t, addr, tt.request)
		if resp.StatusCode != tt.status || body != tt.body || !strings.HasPrefix(resp.Header.Get("Proxy-Status"), tt.ps) || (tt.ps == "") != (resp.Header.Get("Proxy-Status") == "") {
			t.Errorf("%s: %d %q Proxy-Status %q, want %d %q %q", tt.name, resp.StatusCode, body, resp.Header.Get("Proxy-Status"), tt.status, tt.body, tt.ps)
		}
		if strings.HasPrefix(tt.body, "<h1>") && resp.Header.Get("Content-Type") != html {
			t.Errorf("%s: Content-Type %q", tt.name, resp.Header.Get("Content-Type"))
		}
	}
	// A client denied by the route's list gets the route's 403 page.
	resp, body := proxytest.Do(t, addr, "GET /denied HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp.StatusCode != 403 || body != "<h1>route 403</h1>" || !strings.HasPrefix(resp.Header.Get("Proxy-Status"), "sluice; error=http_request_denied") {
		t.Errorf("denied: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	// A gRPC call's failure is told in grpc-status, with no page.
	resp, body = proxytest.Do(t, addr, "POST /dead HTTP/1.1\r\nHost: h\r\nContent-Type: application/grpc\r\nTE: trailers\r\nContent-Length: 0\r\n\r\n")
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "14" || strings.Contains(body, "route 502") {
		t.Errorf("gRPC: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	// HEAD: the page's length, no body.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	io.WriteString(nc, "HEAD /dead HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	raw, _ := io.ReadAll(nc)
	if head := string(raw); !strings.HasPrefix(head, "HTTP/1.1 502 Bad Gateway\r\n") || !strings.Contains(head, "\r\nContent-Length: 18\r\n") || !strings.HasSuffix(head, "\r\n\r\n") {
		t.Errorf("HEAD: %q", head)
	}
}

// TestFailToProxy checks the hook alone: a page for the error's status,
// nil for another status and for a gRPC call.
func TestFailToProxy(t *testing.T) {
	p := pages(t, map[int]string{504: "<h1>slow</h1>"})
	var s proxy.Session
	if err := h1.ParseRequest(&s.Request, []byte("GET / HTTP/1.1\r\nHost: h\r\n\r\n"), 10); err != nil {
		t.Fatal(err)
	}
	r := p.FailToProxy(&s, &fault.Error{Kind: fault.ResponseTimeout, Source: fault.Upstream})
	if r == nil || r.Status != 504 || string(r.Body) != "<h1>slow</h1>" || !strings.HasPrefix(string(r.Header.Get("Proxy-Status")), "sluice; error=http_response_timeout") ||
		string(r.Header.Get("Cache-Control")) != "no-store" {
		t.Errorf("504: %+v", r)
	}
	if r := p.FailToProxy(&s, &fault.Error{Kind: fault.ConnectRefused, Source: fault.Upstream}); r != nil {
		t.Errorf("502 without a page: %+v", r)
	}
	s.Request.Header.Add("Content-Type", "application/grpc+proto")
	if r := p.FailToProxy(&s, &fault.Error{Kind: fault.ResponseTimeout, Source: fault.Upstream}); r != nil {
		t.Errorf("gRPC: %+v", r)
	}
}
