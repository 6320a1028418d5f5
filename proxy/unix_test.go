package proxy

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
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
	waitFor(t, "the pool to drop the closed connection", func() bool {
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
	waitFor(t, "the access log line", func() bool { return strings.Contains(hs2.access.String(), "upstream="+missing) })
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
	waitFor(t, "the try's error line", func() bool { return strings.Contains(hs2.errors.String(), "ServerName") })
}
