package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/retry"
)

// shortDir returns a new directory under os.TempDir(), removed when the
// test ends: t.TempDir()'s paths can pass the 107 bytes a Unix socket's
// path may have.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ux")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestUnixUpstream proxies to a server on a Unix socket: the client's Host
// goes through, connections are pooled, a request without a Host is sent
// with "Host: localhost", and the options' Host replaces the client's.
func TestUnixUpstream(t *testing.T) {
	up := upstreamtest.StartUnix(t, upstreamtest.Echo())
	if !strings.HasPrefix(up.Addr(), "unix:/") {
		t.Fatalf("server address %q", up.Addr())
	}
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	for i := 0; i < 3; i++ {
		if resp, _ := c.roundTrip("GET /a HTTP/1.1\r\nHost: app.example\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("GET %d: status %d", i, resp.StatusCode)
		}
	}
	if n := up.Accepts(); n != 1 {
		t.Errorf("%d upstream connections for 3 requests in a row, want 1 (pooled)", n)
	}
	resp, _ := hs.do(t, "GET /b HTTP/1.0\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP/1.0 GET: status %d", resp.StatusCode)
	}
	reqs := up.Requests()
	if got := reqs[0].Get("Host"); got != "app.example" {
		t.Errorf("Host sent upstream %q, want the client's app.example", got)
	}
	if got := reqs[3].Get("Host"); got != "localhost" {
		t.Errorf("Host sent upstream for a request without one %q, want localhost", got)
	}
	if !strings.Contains(hs.access.String(), `upstream=`+up.Addr()) {
		t.Errorf("access log does not name the socket:\n%s", hs.access)
	}

	opts := testOptions()
	opts.Host = "internal.example"
	up2 := upstreamtest.StartUnix(t, upstreamtest.Echo())
	hs2 := start(t, peers(opts, up2.Addr()))
	if status, _ := hs2.get(t, "/c"); status != 200 {
		t.Fatalf("status %d", status)
	}
	if got := up2.Requests()[0].Get("Host"); got != "internal.example" {
		t.Errorf("Host sent upstream %q, want the options' internal.example", got)
	}
}

// TestUnixUpstreamIdleClose: a pooled connection to a Unix socket that
// its server closes while idle is never handed out; the next request goes
// on a new connection.
func TestUnixUpstreamIdleClose(t *testing.T) {
	up := upstreamtest.StartUnix(t, upstreamtest.CloseIdleAfter(20*time.Millisecond, upstreamtest.OK("ok")))
	hs := start(t, inOrder(withPolicy(&retry.Policy{Tries: 1}), up.Addr()))
	if status, _ := hs.get(t, "/1"); status != 200 {
		t.Fatalf("status %d", status)
	}
	wait.For(t, "the pool to drop the closed connection", func() bool {
		st := hs.srv.Pool.Stats()
		return st.Idle == 0 && st.Watched+st.Stale > 0 || up.Accepts() > 1
	})
	// With one try, a dead connection handed out would be a 502.
	if status, body := hs.get(t, "/2"); status != 200 || body != "ok" {
		t.Fatalf("after the idle close: %d %q", status, body)
	}
	if n := up.Count("GET", "/2"); n != 1 {
		t.Errorf("upstream saw /2 %d times, want 1", n)
	}
}

// TestUnixUpstreamConnectFailure: a socket path nothing listens on (no
// file, or a file no process accepts on) is a connect failure: the
// request, a POST too, goes to the next server, and with none left the
// answer is 502 with a Proxy-Status naming it.
func TestUnixUpstreamConnectFailure(t *testing.T) {
	dir := shortDir(t)
	missing := "unix:" + filepath.Join(dir, "missing.sock")
	// A socket file whose listener is gone refuses connections.
	stalePath := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stalePath)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	stale := "unix:" + stalePath

	good := upstreamtest.StartUnix(t, upstreamtest.OK("good"))
	hs := start(t, inOrder(withPolicy(&retry.Policy{NonIdempotent: retry.Never}), missing, stale, good.Addr()))
	resp, body := hs.do(t, "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
	if resp.StatusCode != 200 || body != "good" {
		t.Fatalf("got %d %q, want the third server's 200", resp.StatusCode, body)
	}

	hs2 := start(t, inOrder(withPolicy(&retry.Policy{Tries: 1}), missing))
	resp, _ = hs2.do(t, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.StatusCode != 502 || !strings.Contains(resp.Header.Get("Proxy-Status"), "error=") {
		t.Fatalf("missing socket: %d, Proxy-Status %q; want 502 with an error", resp.StatusCode, resp.Header.Get("Proxy-Status"))
	}
	wait.For(t, "the access log line", func() bool { return strings.Contains(hs2.access.String(), "upstream="+missing) })
}

// TestUnixUpstreamH2C speaks HTTP/2 in the clear to a server on a Unix
// socket: many requests, one connection.
func TestUnixUpstreamH2C(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(shortDir(t), "h2.sock"))
	if err != nil {
		t.Fatal(err)
	}
	up := serveH2Upstream(t, ln, nil, echoH2)
	hs := start(t, peers(h2Options(ProtocolH2C, nil), up.addr()))
	c := hs.dial(t)
	for i := 0; i < 5; i++ {
		resp, body := c.roundTrip("POST /h HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
		if resp.StatusCode != 200 || body != "POST /h abc" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := up.conns.Load(); n != 1 {
		t.Errorf("%d upstream connections, want 1", n)
	}
}

// TestUnixUpstreamTLS: the library may put TLS over a Unix socket (the
// config file refuses it). A socket has no host to verify a certificate
// against: with a server name in the TLS config the handshake verifies it,
// and without one the try fails at the handshake, saying why.
func TestUnixUpstreamTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "unix CA")
	ln, err := net.Listen("unix", filepath.Join(shortDir(t), "tls.sock"))
	if err != nil {
		t.Fatal(err)
	}
	tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*ca.Server(t, "app.internal").TLS}})
	go func() {
		for {
			nc, err := tln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntls")
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { tln.Close() })
	addr := "unix:" + ln.Addr().String()

	opts := withPolicy(&retry.Policy{Tries: 1})
	opts.TLS = &TLS{Config: &tls.Config{RootCAs: ca.Pool(), ServerName: "app.internal"}}
	hs := start(t, peers(opts, addr))
	if status, body := hs.get(t, "/"); status != 200 || body != "tls" {
		t.Fatalf("with a server name: %d %q", status, body)
	}

	noName := withPolicy(&retry.Policy{Tries: 1})
	noName.TLS = &TLS{Config: &tls.Config{RootCAs: ca.Pool()}}
	hs2 := start(t, peers(noName, addr))
	if status, _ := hs2.get(t, "/"); status != 502 {
		t.Fatalf("without a server name: status %d, want 502", status)
	}
	wait.For(t, "the try's error line", func() bool { return strings.Contains(hs2.errors.String(), "ServerName") })
}

// serveUnix serves hs's Server on a Unix socket too, until the test ends
// (Shutdown closes it), and returns the socket's path.
func (hs *harness) serveUnix(t *testing.T, opts ListenerOptions) string {
	t.Helper()
	path := filepath.Join(shortDir(t), "sluice.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go hs.srv.ServeWith(ln, opts)
	return path
}

// dialUnix is dial, over the Unix socket at path.
func dialUnix(t *testing.T, path string) *client {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// TestUnixListener serves clients on a Unix socket: the client's address
// is "unix:" (UnixClient) in X-Forwarded-For and the access log, and an
// untrusted peer's X-Forwarded-For is replaced by it.
func TestUnixListener(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	hs := start(t, peers(testOptions(), up.Addr()))
	path := hs.serveUnix(t, ListenerOptions{})
	c := dialUnix(t, path)
	for i := range 3 {
		resp, _ := c.roundTrip("GET /u HTTP/1.1\r\nHost: app.example\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d over the Unix socket: %d", i, resp.StatusCode)
		}
	}
	reqs := up.Requests()
	if got := reqs[0].Get("X-Forwarded-For"); got != "unix:" {
		t.Errorf("X-Forwarded-For upstream %q, want unix: (the untrusted peer's replaced)", got)
	}
	if got := reqs[0].Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto %q", got)
	}
	wait.For(t, "the access log lines", func() bool { return strings.Count(hs.access.String(), "target=/u") == 3 })
	if !strings.Contains(hs.access.String(), "client=unix: method=GET") {
		t.Errorf("access log:\n%s\nwant client=unix:", hs.access)
	}
	// The server counts the connection under the socket's path.
	var listeners []string
	hs.srv.Connections(func(l, _ string) { listeners = append(listeners, l) })
	if len(listeners) != 1 || listeners[0] != path {
		t.Errorf("connections by listener %v, want one on %s", listeners, path)
	}
}

// TestUnixListenerTrusted: with Forwarding.TrustUnix, the peer on a Unix
// socket is a trusted proxy: its X-Forwarded-For is extended, and with
// ClientFromXFF names the client.
func TestUnixListenerTrusted(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) {
		s.Forwarding.TrustUnix, s.Forwarding.ClientFromXFF = true, true
	})
	path := hs.serveUnix(t, ListenerOptions{})
	c := dialUnix(t, path)
	resp, _ := c.roundTrip("GET /t HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Proto: https\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r := up.Requests()[0]
	if got := r.Get("X-Forwarded-For"); got != "203.0.113.9, unix:" {
		t.Errorf("X-Forwarded-For upstream %q, want the trusted peer's list extended: 203.0.113.9, unix:", got)
	}
	if got := r.Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("X-Forwarded-Proto %q, want the trusted peer's https", got)
	}
	wait.For(t, "the access log line", func() bool { return strings.Contains(hs.access.String(), "target=/t") })
	if !strings.Contains(hs.access.String(), "client=203.0.113.9 peer=unix: ") {
		t.Errorf("access log:\n%s\nwant client=203.0.113.9 peer=unix:", hs.access)
	}
	// A TCP client is not trusted for it.
	cr, _ := hs.do(t, "GET /tcp HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n")
	if cr.StatusCode != 200 {
		t.Fatal(cr.Status)
	}
	if got := up.Requests()[1].Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For of a TCP client %q, want 127.0.0.1 (TrustUnix trusts Unix peers only)", got)
	}
}

// TestUnixListenerParksAndLingers: an idle client on a Unix socket parks
// (Linux: the parker's epoll set takes the socket) and is served when its
// next request comes; a slow head is answered 408, and the close lingers
// for what the client still sends rather than closing under it.
func TestUnixListenerParksAndLingers(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) {
		s.IdleTimeout = time.Minute
		s.HeaderTimeout = parkAfter + 300*time.Millisecond
	})
	path := hs.serveUnix(t, ListenerOptions{})
	c := dialUnix(t, path)
	if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if runtime.GOOS == "linux" {
		wait.For(t, "the idle Unix connection to park", func() bool { return parkedConns(hs.srv) == 1 })
	}
	if resp, body := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("after parking: %d %q", resp.StatusCode, body)
	}

	slow := dialUnix(t, path)
	slow.send("GET / HTTP/1.1\r\nHo")
	resp, err := readHTTP(slow)
	if err != nil || resp.StatusCode != 408 {
		t.Fatalf("slow head over a Unix socket: %v, %v; want 408", resp, err)
	}
	slow.send("st: still sending") // read and thrown away while lingering
	slow.nc.(*net.UnixConn).CloseWrite()
	if !slow.closed(5 * time.Second) {
		t.Fatal("the lingering connection was not closed after the client's close")
	}
}

// TestUnixListenerTLS terminates TLS on a Unix socket, HTTP/2 and
// HTTP/1.1 by ALPN.
func TestUnixListenerTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "unix listener CA")
	up := upstreamtest.Start(t, upstreamtest.OK("over tls"))
	hs := start(t, peers(testOptions(), up.Addr()))
	path := hs.serveUnix(t, ListenerOptions{TLS: &tls.Config{Certificates: []tls.Certificate{*ca.Server(t, "app.example").TLS}}})
	for _, proto := range []string{"http/1.1", "h2"} {
		client := &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
			TLSClientConfig:   &tls.Config{RootCAs: ca.Pool(), ServerName: "app.example", NextProtos: []string{proto}},
			ForceAttemptHTTP2: proto == "h2",
		}}
		resp, err := client.Get("https://app.example/")
		if err != nil {
			t.Fatalf("%s over TLS over a Unix socket: %v", proto, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		client.CloseIdleConnections()
		if resp.StatusCode != 200 || string(body) != "over tls" || resp.TLS == nil {
			t.Fatalf("%s: %d %q", proto, resp.StatusCode, body)
		}
		if want := map[string]int{"http/1.1": 1, "h2": 2}[proto]; resp.ProtoMajor != want {
			t.Errorf("%s: served as HTTP/%d", proto, resp.ProtoMajor)
		}
	}
	if got := up.Requests()[0].Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("X-Forwarded-Proto %q, want https", got)
	}
}
