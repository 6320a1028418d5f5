package auth

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/route"
)

// authService is a small authentication service, as Authelia or
// oauth2-proxy answer a proxy's subrequests: a session cookie lets the
// request through, naming its user; a bad bearer token is refused with a
// challenge; anything else is sent to log in, back to where it was going.
type authService struct {
	addr  string
	mu    sync.Mutex
	seen  []*http.Request
	conns int
}

func startAuthService(t *testing.T) *authService {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &authService{addr: ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(a.serve), ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			a.mu.Lock()
			a.conns++
			a.mu.Unlock()
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return a
}

func (a *authService) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r)
	a.mu.Unlock()
	if c, err := r.Cookie("session"); err == nil && c.Value == "good" {
		w.Header().Set("Remote-User", "alice")
		w.Header().Set("Remote-Groups", "admins")
		w.Header().Set("X-Internal", "not for the upstream")
		w.WriteHeader(http.StatusOK)
		return
	}
	if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":"invalid_token"}`)
		return
	}
	back := r.Header.Get("X-Forwarded-Proto") + "://" + r.Header.Get("X-Forwarded-Host") + r.Header.Get("X-Forwarded-Uri")
	http.SetCookie(w, &http.Cookie{Name: "flow", Value: "1"})
	http.Redirect(w, r, "https://login.example/?rd="+back, http.StatusFound)
}

func (a *authService) requests() []*http.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*http.Request(nil), a.seen...)
}

func mustForward(t *testing.T, o ForwardOptions) *Forward {
	t.Helper()
	f, err := NewForward(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// serveForward serves a table whose one route, to up, asks f first.
func serveForward(t *testing.T, f *Forward, up string, log io.Writer) string {
	t.Helper()
	tbl := route.New(route.Route{Upstream: proxytest.Peer{P: &proxy.Peer{Addr: up}}, Phases: []any{f}})
	if log == nil {
		log = io.Discard
	}
	return proxytest.Serve(t, &proxy.Server{Handler: tbl,
		ErrorLog:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(slog.NewTextHandler(log, nil)),
	})
}

// TestForward checks the exchange with a real authentication service: a
// session lets the request through with the user's fields (and only the
// named ones) in the request upstream, a client's own copy of them
// removed; a bad token gets the service's 401 as it came; anything else
// the service's redirect to its login page, cookie included; the service
// hears what the client asked for; and its connection is kept.
func TestForward(t *testing.T) {
	svc := startAuthService(t)
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Respond(200, "user="+r.Get("Remote-User")+" groups="+r.Get("Remote-Groups")+" internal="+r.Get("X-Internal")+" cookie="+r.Get("Cookie"))
	})
	var log proxytest.Buffer
	f := mustForward(t, ForwardOptions{Addr: svc.addr, Path: "/api/verify?x=1", ResponseHeaders: []string{"Remote-User", "remote-groups"}})
	addr := serveForward(t, f, up.Addr(), &log)

	resp, body := proxytest.Do(t, addr, "GET /page?q=1 HTTP/1.1\r\nHost: shop.example\r\nCookie: session=good\r\nRemote-User: mallory\r\n\r\n")
	if resp.StatusCode != 200 || body != "user=alice groups=admins internal= cookie=session=good" {
		t.Errorf("with a session: %d %q", resp.StatusCode, body)
	}
	resp, body = proxytest.Do(t, addr, "GET /api/x HTTP/1.1\r\nHost: shop.example\r\nAuthorization: Bearer nope\r\n\r\n")
	if resp.StatusCode != 401 || body != `{"error":"invalid_token"}` || resp.Header.Get("WWW-Authenticate") != `Bearer error="invalid_token"` ||
		resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Proxy-Status") != "" {
		t.Errorf("a bad token: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = proxytest.Do(t, addr, "POST /cart?item=3 HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 4\r\nRemote-User: mallory\r\n\r\nabcd")
	if resp.StatusCode != 302 || resp.Header.Get("Location") != "https://login.example/?rd=http://shop.example/cart?item=3" ||
		resp.Header.Get("Set-Cookie") != "flow=1" || !strings.Contains(body, "Found") {
		t.Errorf("no session: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if n := len(up.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests, want the one let through", n)
	}

	seen := svc.requests()
	if len(seen) != 3 {
		t.Fatalf("the service got %d subrequests", len(seen))
	}
	post := seen[2]
	for name, want := range map[string]string{
		"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/cart?item=3", "X-Forwarded-Host": "shop.example",
		"X-Forwarded-Proto": "http", "X-Forwarded-For": "127.0.0.1", "Content-Length": "", "Remote-User": "",
	} {
		if got := post.Header.Get(name); got != want {
			t.Errorf("the service got %s %q, want %q", name, got, want)
		}
	}
	if id := post.Header.Get("X-Request-Id"); len(id) != 32 {
		t.Errorf("the service got X-Request-Id %q, want sluice's", id)
	}
	if post.Method != "GET" || post.URL.String() != "/api/verify?x=1" || post.Host != svc.addr || post.ContentLength != 0 {
		t.Errorf("the subrequest: %s %s Host %s, %d bytes of body", post.Method, post.URL, post.Host, post.ContentLength)
	}
	if seen[0].Header.Get("Cookie") != "session=good" {
		t.Errorf("the service did not get the client's cookie: %v", seen[0].Header)
	}
	svc.mu.Lock()
	conns := svc.conns
	svc.mu.Unlock()
	if conns != 1 {
		t.Errorf("%d connections to the service for 3 subrequests, want 1 kept", conns)
	}
	wait.For(t, "the access log lines", func() bool { return strings.Count(log.String(), "\n") == 3 })
	for _, note := range []string{"forward_auth=200", "forward_auth=401", "forward_auth=302"} {
		if !strings.Contains(log.String(), " "+note+"\n") {
			t.Errorf("no access log line ends with %s:\n%s", note, log.String())
		}
	}
}

// TestForwardRequestHeaders checks that only the fields named go to the
// service when a list is given.
func TestForwardRequestHeaders(t *testing.T) {
	svc := upstreamtest.Start(t, upstreamtest.OK(""))
	up := upstreamtest.Start(t, upstreamtest.OK("in"))
	f := mustForward(t, ForwardOptions{Addr: svc.Addr(), RequestHeaders: []string{"cookie"}})
	addr := serveForward(t, f, up.Addr(), nil)
	if status, _ := proxytest.Get(t, addr, "/", "Cookie: a=1\r\nAuthorization: Basic x\r\nX-Forwarded-Uri: /forged\r\nX-Request-Id: forged\r\n"); status != 200 {
		t.Fatalf("status %d", status)
	}
	r := svc.Requests()[0]
	if r.Target != "/" || r.Get("Cookie") != "a=1" || r.Get("Authorization") != "" || r.Get("X-Forwarded-Uri") != "/" || r.Get("Host") != svc.Addr() ||
		r.Get("X-Request-Id") == "forged" || len(r.Get("X-Request-Id")) != 32 {
		t.Errorf("the service got %s %q", r.Target, r.RawHead)
	}
}

// TestForwardFailures checks that a service that cannot answer lets
// nothing through: each failure is sluice's own answer, with its status
// and a Proxy-Status naming forward_auth, and the upstream hears nothing.
func TestForwardFailures(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("in"))
	big := upstreamtest.Start(t, upstreamtest.Status(403, strings.Repeat("x", 100)))
	tests := []struct {
		name   string
		addr   string
		o      ForwardOptions
		status int
		ps     string
	}{
		{"down", upstreamtest.Dead(t), ForwardOptions{}, 502, "sluice; error=connection_refused"},
		{"slow", upstreamtest.Start(t, upstreamtest.Silent()).Addr(), ForwardOptions{ResponseTimeout: 100 * time.Millisecond}, 504, "sluice; error=http_response_timeout"},
		{"not HTTP", upstreamtest.Start(t, upstreamtest.GarbageStatus()).Addr(), ForwardOptions{}, 502, "sluice; error=http_protocol_error"},
		{"cut short", upstreamtest.Start(t, upstreamtest.Truncated()).Addr(), ForwardOptions{}, 502, "sluice; error=http_response_incomplete"},
		{"closed", upstreamtest.Start(t, upstreamtest.ResetAfterRead()).Addr(), ForwardOptions{}, 502, "sluice; error=connection_terminated"},
		{"too big", big.Addr(), ForwardOptions{MaxBody: 99}, 502, "sluice; error=http_response_body_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Addr = tt.addr
			f := mustForward(t, tt.o)
			var log proxytest.Buffer
			f.o.Log = slog.New(slog.NewTextHandler(&log, nil))
			addr := serveForward(t, f, up.Addr(), nil)
			resp, body := proxytest.Do(t, addr, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
			if resp.StatusCode != tt.status || !strings.HasPrefix(resp.Header.Get("Proxy-Status"), tt.ps+`; details="forward_auth `+tt.addr+`"`) ||
				!strings.Contains(body, "(forward_auth: ") {
				t.Errorf("%d %q Proxy-Status %q, want %d %s", resp.StatusCode, body, resp.Header.Get("Proxy-Status"), tt.status, tt.ps)
			}
			if !f.Verbatim(&proxy.Response{Status: 401}) || f.Verbatim(&proxy.Response{Status: tt.status, Header: headerOf("Proxy-Status", resp.Header.Get("Proxy-Status"))}) {
				t.Error("Verbatim mistakes the service's answers and sluice's own")
			}
			if !strings.Contains(log.String(), "forward_auth: the authentication service failed") {
				t.Errorf("nothing logged: %q", log.String())
			}
		})
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	// A body within MaxBody is passed on.
	addr := serveForward(t, mustForward(t, ForwardOptions{Addr: big.Addr(), MaxBody: 100}), up.Addr(), nil)
	if resp, body := proxytest.Do(t, addr, "GET / HTTP/1.1\r\nHost: h\r\n\r\n"); resp.StatusCode != 403 || len(body) != 100 {
		t.Errorf("a 100-byte answer: %d %d bytes", resp.StatusCode, len(body))
	}
}

// TestForwardStaleConnection checks the pooled connection to the service
// that the service closed as it was reused: the subrequest goes again on
// a new connection, and the request through.
func TestForwardStaleConnection(t *testing.T) {
	svc := upstreamtest.Start(t, upstreamtest.AnswerFirstThenDrop())
	up := upstreamtest.Start(t, upstreamtest.OK("in"))
	addr := serveForward(t, mustForward(t, ForwardOptions{Addr: svc.Addr()}), up.Addr(), nil)
	for i := range 3 {
		if status, body := proxytest.Get(t, addr, "/", ""); status != 200 || body != "in" {
			t.Fatalf("request %d: %d %q", i, status, body)
		}
	}
	if n := svc.Accepts(); n != 3 {
		t.Errorf("%d connections to the service, want 3 (each reused one dropped, and replaced)", n)
	}
}

func headerOf(name, value string) (h h1.Header) {
	h.Add(name, value)
	return h
}

func TestNewForwardErrors(t *testing.T) {
	for _, tt := range []struct {
		o   ForwardOptions
		msg string
	}{
		{ForwardOptions{}, "no address"},
		{ForwardOptions{Addr: "a:1", Path: "auth"}, "starting with /"},
		{ForwardOptions{Addr: "a:1", Path: "/a b"}, "visible ASCII"},
		{ForwardOptions{Addr: "a:1", RequestHeaders: []string{"Content-Length"}}, "request header Content-Length is not the client's to pass on"},
		{ForwardOptions{Addr: "a:1", RequestHeaders: []string{"a b"}}, "is not a field name"},
		{ForwardOptions{Addr: "a:1", ResponseHeaders: []string{"Transfer-Encoding"}}, "cannot be copied into a request"},
		{ForwardOptions{Addr: "a:1", ResponseHeaders: []string{"Host"}}, "cannot be copied into a request"},
		{ForwardOptions{Addr: "a:1", Host: "a\r\nb"}, "is not a field value"},
	} {
		if _, err := NewForward(tt.o); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("NewForward(%+v): %v, want ...%s...", tt.o, err, tt.msg)
		}
	}
	f := mustForward(t, ForwardOptions{Addr: "unix:/run/auth.sock"})
	if f.o.Host != "localhost" || f.o.Path != "/" || f.o.ConnectTimeout != DefaultForwardConnectTimeout || f.o.ResponseTimeout != DefaultForwardResponseTimeout || f.o.MaxBody != DefaultForwardMaxBody {
		t.Errorf("defaults: %+v", f.o)
	}
}
