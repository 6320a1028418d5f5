package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy/internal/park"
)

// tlsSite is a CA and a server certificate for example.com signed by it.
type tlsSite struct {
	ca   *tlstest.CA
	cert *tlstest.Leaf
}

func newSite(t testing.TB) *tlsSite {
	ca := tlstest.NewCA(t, "test CA")
	return &tlsSite{ca: ca, cert: ca.Server(t, "example.com", "127.0.0.1")}
}

// server is a server config serving the site's certificate.
func (ts *tlsSite) server() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{*ts.cert.TLS}}
}

// client is a client config that trusts the site's CA.
func (ts *tlsSite) client() *tls.Config {
	return &tls.Config{ServerName: "example.com", RootCAs: ts.ca.Pool(), NextProtos: []string{"http/1.1"}}
}

// startTLS runs a proxy for h on a TLS listener on 127.0.0.1:0 until the
// test ends.
func startTLS(t testing.TB, h Handler, cfg *tls.Config, tweak ...func(*Server)) *harness {
	t.Helper()
	hs := &harness{errors: &logBuffer{}, access: &logBuffer{}}
	hs.srv = &Server{
		Handler:   h,
		ErrorLog:  slog.New(slog.NewTextHandler(hs.errors, &slog.HandlerOptions{Level: slog.LevelDebug})),
		AccessLog: slog.New(slog.NewTextHandler(hs.access, nil)),
	}
	for _, f := range tweak {
		f(hs.srv)
	}
	hs.srv.init() // here, for the tests that look at its parker
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.srv.ServeTLS(ln, cfg)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.srv.Shutdown(ctx)
		<-done
		if t.Failed() {
			t.Logf("error log:\n%s", hs.errors)
		}
	})
	return hs
}

// dialTLS opens a TLS connection to the proxy and completes its handshake.
func (hs *harness) dialTLS(t testing.TB, cfg *tls.Config) (*client, error) {
	t.Helper()
	nc, err := net.Dial("tcp", hs.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(nc, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	return &client{t: t, nc: tc, br: bufio.NewReader(tc)}, nil
}

func (hs *harness) mustDialTLS(t testing.TB, cfg *tls.Config) *client {
	t.Helper()
	c, err := hs.dialTLS(t, cfg)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return c
}

// tlsCounts is an Observer that counts handshakes and their failures.
type tlsCounts struct {
	mu     sync.Mutex
	ok     map[string]int // by version, with "+resumed"
	failed map[HandshakeFailure]int
	errs   []error
}

func newTLSCounts() *tlsCounts {
	return &tlsCounts{ok: map[string]int{}, failed: map[HandshakeFailure]int{}}
}

func (o *tlsCounts) Try(*Session, *Attempt)       {}
func (o *tlsCounts) Done(*Session)                {}
func (o *tlsCounts) BudgetDenied(*Session, *Peer) {}
func (o *tlsCounts) Handshake(st *tls.ConnectionState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := TLSVersion(st.Version)
	if st.DidResume {
		k += "+resumed"
	}
	o.ok[k]++
}

func (o *tlsCounts) HandshakeFailed(why HandshakeFailure, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed[why]++
	o.errs = append(o.errs, err)
}

func (o *tlsCounts) failures(why HandshakeFailure) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed[why]
}

func (o *tlsCounts) handshakes(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ok[k]
}

var _ TLSObserver = (*tlsCounts)(nil)

// TLS 1.2 and 1.3 clients are served, several requests on one connection,
// the upstream is told the scheme was https, and the access log gives the
// version and the name the client asked for.
func TestTLSServesRequests(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hello"))
	site := newSite(t)
	obs := newTLSCounts()
	hs := startTLS(t, peers(testOptions(), up.Addr()), site.server(), func(s *Server) { s.Observer = obs })
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		cfg := site.client()
		cfg.MaxVersion = v
		c := hs.mustDialTLS(t, cfg)
		if p := c.nc.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "http/1.1" {
			t.Errorf("ALPN %q, want http/1.1", p)
		}
		for i := 0; i < 3; i++ {
			resp, body := c.roundTrip("GET /x HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-Proto: http\r\n\r\n")
			if resp.StatusCode != 200 || body != "hello" {
				t.Fatalf("TLS %s, request %d: %d %q", TLSVersion(v), i, resp.StatusCode, body)
			}
		}
		c.nc.Close()
		if n := obs.handshakes(TLSVersion(v)); n != 1 {
			t.Errorf("TLS %s: %d handshakes counted, want 1", TLSVersion(v), n)
		}
	}
	for i, r := range up.Requests() {
		if got := r.Get("X-Forwarded-Proto"); got != "https" {
			t.Errorf("request %d upstream: X-Forwarded-Proto %q, want https (the client's http replaced)", i, got)
		}
	}
	waitFor(t, "the access log lines", func() bool { return strings.Count(hs.access.String(), " status=200 ") == 6 })
	for _, want := range []string{"tls=1.2 sni=example.com", "tls=1.3 sni=example.com"} {
		if n := strings.Count(hs.access.String(), want); n != 3 {
			t.Errorf("%d access log lines with %q, want 3:\n%s", n, want, hs.access)
		}
	}
}

// A plain HTTP request on the TLS port is answered 400 in plain HTTP and
// the connection closes; bytes that are neither TLS nor HTTP get the
// connection closed. Neither hangs, and neither reaches the error log above
// debug level.
func TestPlainBytesOnTLSPort(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hello"))
	obs := newTLSCounts()
	var info logBuffer
	hs := startTLS(t, peers(testOptions(), up.Addr()), newSite(t).server(), func(s *Server) {
		s.Observer = obs
		s.ErrorLog = slog.New(slog.NewTextHandler(&info, nil))
		s.HeaderTimeout = time.Minute // what ends these is not a timeout
	})
	// More than one request, and a body: all unread when the answer goes.
	c := hs.dial(t)
	resp, body := c.roundTrip("POST /form HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.StatusCode != 400 || !strings.Contains(body, "plain HTTP request was sent to an HTTPS port") || !resp.Close {
		t.Errorf("plain HTTP on the TLS port: %d %q, close %v", resp.StatusCode, body, resp.Close)
	}
	if !c.closed(5 * time.Second) {
		t.Error("the connection stayed open after the 400")
	}
	g := hs.dial(t)
	g.send("\x00\x01garbage that is not a TLS record\r\n\r\n")
	if !g.closed(5 * time.Second) {
		t.Error("garbage on the TLS port: the connection stayed open")
	}
	waitFor(t, "both failures counted", func() bool {
		return obs.failures(FailedPlainHTTP) == 1 && obs.failures(FailedNotTLS) == 1
	})
	if len(up.Requests()) != 0 {
		t.Errorf("the upstream got %d requests", len(up.Requests()))
	}
	if info.String() != "" {
		t.Errorf("failed handshakes wrote to the error log at info level:\n%s", info.String())
	}
}

// A handshake that does not complete within the header timeout is cut,
// whether the client sent nothing or part of its ClientHello.
func TestStalledHandshakeCut(t *testing.T) {
	obs := newTLSCounts()
	hs := startTLS(t, peers(testOptions(), "127.0.0.1:1"), newSite(t).server(), func(s *Server) {
		s.Observer = obs
		s.HeaderTimeout = 300 * time.Millisecond
	})
	silent := hs.dial(t)
	partial := hs.dial(t)
	partial.send(partialHello)
	for name, c := range map[string]*client{"silent": silent, "partial ClientHello": partial} {
		// Closed, with a FIN or, where the client's bytes were left
		// unread, a reset.
		c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c.br); isTimeout(err) {
			t.Errorf("%s: the connection outlived the header timeout", name)
		}
	}
	waitFor(t, "two timeouts counted", func() bool { return obs.failures(FailedTimeout) == 2 })
	if !strings.Contains(hs.errors.String(), "reason=timeout") {
		t.Errorf("no debug line for the timeouts:\n%s", hs.errors)
	}
}

// partialHello is the start of a ClientHello record that announces 512
// bytes and brings 6.
const partialHello = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"

// Hundreds of clients that open a connection and send part of a
// ClientHello, or nothing, do not keep others from being served while they
// wait. (bench/tlsidle sends 10,000.)
func TestHalfOpenHandshakesDoNotStarveOthers(t *testing.T) {
	const n = 300
	up := upstreamtest.Start(t, upstreamtest.OK("hello"))
	site := newSite(t)
	hs := startTLS(t, peers(testOptions(), up.Addr()), site.server(), func(s *Server) { s.HeaderTimeout = time.Minute })
	for i := 0; i < n; i++ {
		c := hs.dial(t)
		if i%2 == 0 {
			c.send(partialHello)
		}
	}
	if hs.srv.parker != nil {
		// On Linux they wait without goroutines (conn.awaitHello).
		waitFor(t, "the half-open handshakes to park", func() bool { return parkedConns(hs.srv) == n })
	}
	for i := 0; i < 20; i++ {
		c := hs.mustDialTLS(t, site.client())
		if resp, body := c.roundTrip("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"); resp.StatusCode != 200 || body != "hello" {
			t.Fatalf("client %d beside %d half-open handshakes: %d %q", i, n, resp.StatusCode, body)
		}
		c.nc.Close()
	}
}

// A listener's oldest TLS version refuses clients that offer only older
// ones, and counts them.
func TestTLSMinVersion(t *testing.T) {
	site := newSite(t)
	up := upstreamtest.Start(t, upstreamtest.OK("hello"))
	obs := newTLSCounts()
	cfg := site.server()
	cfg.MinVersion = tls.VersionTLS13
	hs := startTLS(t, peers(testOptions(), up.Addr()), cfg, func(s *Server) { s.Observer = obs })
	tests := []struct {
		max uint16
		ok  bool
	}{
		{tls.VersionTLS12, false},
		{tls.VersionTLS13, true},
	}
	for _, tt := range tests {
		cc := site.client()
		cc.MaxVersion = tt.max
		c, err := hs.dialTLS(t, cc)
		if (err == nil) != tt.ok {
			t.Fatalf("client up to TLS %s: handshake error %v, want success %v", TLSVersion(tt.max), err, tt.ok)
		}
		if c != nil {
			if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"); resp.StatusCode != 200 {
				t.Fatalf("TLS 1.3 client: %d", resp.StatusCode)
			}
		}
	}
	waitFor(t, "the refusal counted", func() bool { return obs.failures(FailedVersion) == 1 })
}

// A client that offers only protocols the server does not speak is
// refused, and counted as such; one that offers h2 gets it, the server's
// first choice.
func TestTLSALPNRefusal(t *testing.T) {
	site := newSite(t)
	obs := newTLSCounts()
	hs := startTLS(t, peers(testOptions(), "127.0.0.1:1"), site.server(), func(s *Server) { s.Observer = obs })
	cc := site.client()
	cc.NextProtos = []string{"spdy/3.1"}
	if _, err := hs.dialTLS(t, cc); err == nil {
		t.Fatal("a spdy-only client completed its handshake")
	}
	for _, offer := range [][]string{{"http/1.1", "h2"}, {"h2", "http/1.1"}} {
		cc.NextProtos = offer
		c := hs.mustDialTLS(t, cc)
		if p := c.nc.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Errorf("a client offering %v got %q", offer, p)
		}
	}
	waitFor(t, "the refusal counted", func() bool { return obs.failures(FailedALPN) == 1 })
}

// Client certificates: required, or verified when given; a certificate
// from the listener's CA, one from another CA, none.
func TestTLSClientAuth(t *testing.T) {
	site := newSite(t)
	clients := tlstest.NewCA(t, "clients CA")
	stranger := tlstest.NewCA(t, "another CA")
	good, bad := clients.Client(t, "alice"), stranger.Client(t, "mallory")
	up := upstreamtest.Start(t, upstreamtest.OK("hello"))
	tests := []struct {
		mode   tls.ClientAuthType
		cert   *tlstest.Leaf
		ok     bool
		reason HandshakeFailure
	}{
		{tls.RequireAndVerifyClientCert, good, true, 0},
		{tls.RequireAndVerifyClientCert, bad, false, FailedClientCert},
		{tls.RequireAndVerifyClientCert, nil, false, FailedOther},
		{tls.VerifyClientCertIfGiven, good, true, 0},
		{tls.VerifyClientCertIfGiven, bad, false, FailedClientCert},
		{tls.VerifyClientCertIfGiven, nil, true, 0},
	}
	for _, tt := range tests {
		name := tt.mode.String() + ", no certificate"
		if tt.cert != nil {
			name = tt.mode.String() + ", " + tt.cert.TLS.Leaf.Subject.CommonName
		}
		t.Run(name, func(t *testing.T) {
			obs := newTLSCounts()
			cfg := site.server()
			cfg.ClientAuth, cfg.ClientCAs = tt.mode, clients.Pool()
			hs := startTLS(t, peers(testOptions(), up.Addr()), cfg, func(s *Server) { s.Observer = obs })
			cc := site.client()
			if tt.cert != nil {
				// Sent whatever CAs the server names (crypto/tls's
				// client would hold back one they do not).
				cc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
					return tt.cert.TLS, nil
				}
			}
			// With TLS 1.3 the client's handshake ends before the
			// server checks its certificate: the refusal comes with
			// the first read.
			c, err := hs.dialTLS(t, cc)
			if err == nil {
				c.send("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
				var resp *http.Response
				if resp, err = http.ReadResponse(c.br, nil); err == nil {
					resp.Body.Close()
				}
			}
			if (err == nil) != tt.ok {
				t.Fatalf("got error %v, want success %v", err, tt.ok)
			}
			if !tt.ok {
				waitFor(t, "the refusal counted", func() bool { return obs.failures(tt.reason) == 1 })
			}
		})
	}
}

// A response cut after it began is aborted with a reset, never with a
// close_notify, which would tell the client that a close-delimited body
// ended where it was meant to.
func TestTLSCutResponseEndsInReset(t *testing.T) {
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.WriteString("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npartial")
		time.Sleep(20 * time.Millisecond)
		c.Reset()
	})
	site := newSite(t)
	hs := startTLS(t, peers(testOptions(), up.Addr()), site.server())
	c := hs.mustDialTLS(t, site.client())
	c.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	got, err := io.ReadAll(c.br)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read %q and then %v, want a reset", got, err)
	}
}

// A malformed request over TLS is answered 400 and the connection closes
// cleanly after a lingering read: the answer is not lost to a reset though
// the client sent more.
func TestTLSBadRequestAnsweredBeforeClose(t *testing.T) {
	site := newSite(t)
	hs := startTLS(t, peers(testOptions(), "127.0.0.1:1"), site.server())
	c := hs.mustDialTLS(t, site.client())
	c.send("GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n" + strings.Repeat("more bytes the proxy will not read\r\n", 2000))
	resp, _ := c.response("GET")
	if resp.StatusCode != 400 {
		t.Fatalf("got %d, want 400", resp.StatusCode)
	}
	if _, err := io.ReadAll(c.br); err != nil {
		t.Errorf("after the 400: %v, want the clean end of the stream (close_notify)", err)
	}
}

// Idle TLS keep-alive connections give up their goroutines after parkAfter
// (on Linux), as plain ones do, and come back when their next request
// arrives; the parker closes them at their idle timeout, and Shutdown
// closes those still parked.
func TestTLSIdleConnectionsPark(t *testing.T) {
	if !park.Supported {
		t.Skip("no parker on this platform: idle connections keep their goroutine")
	}
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	site := newSite(t)
	hs := startTLS(t, peers(testOptions(), up.Addr()), site.server())
	warm := hs.mustDialTLS(t, site.client())
	warm.roundTrip("GET /warm HTTP/1.1\r\nHost: a\r\n\r\n")
	warm.nc.Close()
	time.Sleep(2 * parkAfter)
	serving := func() int { return runtime.NumGoroutine() - hs.srv.workers.Idle() }
	base := serving()

	const n = 50
	var clients []*client
	for i := 0; i < n; i++ {
		c := hs.mustDialTLS(t, site.client())
		if resp, _ := c.roundTrip("GET /a HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		clients = append(clients, c)
	}
	waitFor(t, "idle TLS connections to park", func() bool { return serving() < base+n/2 })
	for i, c := range clients {
		// Two requests in two records sent together: crypto/tls may take
		// both from the socket in one read and hand over the first; the
		// second, held by crypto/tls with the socket empty, must be
		// served without waiting for the socket.
		c.send("GET /b HTTP/1.1\r\nHost: a\r\n\r\n")
		c.send("GET /c HTTP/1.1\r\nHost: a\r\n\r\n")
		for _, want := range []string{"b", "c"} {
			if resp, body := c.response("GET"); resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("client %d after parking, request %s: %d %q", i, want, resp.StatusCode, body)
			}
		}
	}
}

func TestTLSParkedConnectionIdleTimeout(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	site := newSite(t)
	hs := startTLS(t, peers(testOptions(), up.Addr()), site.server(), func(s *Server) { s.IdleTimeout = parkAfter + 300*time.Millisecond })
	c := hs.mustDialTLS(t, site.client())
	if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c.br); err != nil {
		t.Fatalf("a parked TLS connection at its idle timeout: %v, want a clean end (close_notify)", err)
	}
}

// slowHello sends the first write on it, the ClientHello, in three pieces
// a while apart, the first after a wait: the proxy waits for it with the
// connection parked in between (on Linux), and the handshake then reads
// the pieces it stashed.
type slowHello struct {
	net.Conn
	pause time.Duration
	sent  bool
}

func (s *slowHello) Write(b []byte) (int, error) {
	if s.sent {
		return s.Conn.Write(b)
	}
	s.sent = true
	time.Sleep(s.pause)
	cut := []int{0, 3, len(b) / 2, len(b)}
	for i := 1; i < len(cut); i++ {
		if _, err := s.Conn.Write(b[cut[i-1]:cut[i]]); err != nil {
			return 0, err
		}
		if i < len(cut)-1 {
			time.Sleep(s.pause)
		}
	}
	return len(b), nil
}

func TestSlowClientHello(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hello"))
	site := newSite(t)
	obs := newTLSCounts()
	hs := startTLS(t, peers(testOptions(), up.Addr()), site.server(), func(s *Server) { s.Observer = obs })
	nc, err := net.Dial("tcp", hs.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(&slowHello{Conn: nc, pause: 2 * parkAfter}, site.client())
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake with a ClientHello in pieces: %v", err)
	}
	c := &client{t: t, nc: tc, br: bufio.NewReader(tc)}
	if resp, body := c.roundTrip("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"); resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if obs.handshakes("1.3") != 1 {
		t.Errorf("%d TLS 1.3 handshakes counted, want 1", obs.handshakes("1.3"))
	}
}

// A listener of the caller's that makes TLS connections itself
// (tls.NewListener) is served as ServeTLS serves.
func TestServeTLSListenerOfTheCallers(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hello"))
	site := newSite(t)
	hs := &harness{errors: &logBuffer{}}
	hs.srv = &Server{Handler: peers(testOptions(), up.Addr()),
		ErrorLog: slog.New(slog.NewTextHandler(hs.errors, nil))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs.addr = ln.Addr().String()
	go hs.srv.Serve(tls.NewListener(ln, site.server()))
	t.Cleanup(func() { hs.srv.Shutdown(context.Background()) })
	c := hs.mustDialTLS(t, site.client())
	if resp, body := c.roundTrip("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"); resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if got := up.Requests()[0].Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("X-Forwarded-Proto %q, want https", got)
	}
}

// An upgrade over TLS becomes a tunnel as over plain HTTP: bytes both
// ways, and the client's close_notify ends it.
func TestTLSUpgradeTunnel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // answers the upgrade, then echoes until EOF
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := newReader(nc)
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		io.Copy(nc, br)
	}()
	site := newSite(t)
	hs := startTLS(t, peers(testOptions(), ln.Addr().String()), site.server())
	c := hs.mustDialTLS(t, site.client())
	c.send("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("got %v %v, want 101", resp, err)
	}
	for _, msg := range []string{"ping", "pong and more"} {
		c.send(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c.br, got); err != nil || string(got) != msg {
			t.Fatalf("echo %q: got %q %v", msg, got, err)
		}
	}
	c.nc.(*tls.Conn).CloseWrite()
	if !c.closed(3 * time.Second) {
		t.Fatal("tunnel not closed after the client finished")
	}
}

// A head that comes in pieces over TLS waits (parked, on Linux) for the
// rest and is served; one not whole within the header timeout is
// answered 408, over TLS.
func TestTLSSlowHead(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	site := newSite(t)
	hs := startTLS(t, peers(testOptions(), up.Addr()), site.server(), func(s *Server) { s.HeaderTimeout = 2 * time.Second })
	slow := hs.mustDialTLS(t, site.client())
	slow.send("GET /slow HTTP/1.1\r\nHo")
	time.Sleep(2 * parkAfter)
	slow.send("st: a\r\n\r\n")
	if resp, body := slow.response("GET"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("a head in two pieces: %d %q", resp.StatusCode, body)
	}
	stalled := hs.mustDialTLS(t, site.client())
	stalled.send("GET /stalled HTTP/1.1\r\nHo")
	if resp, _ := stalled.response("GET"); resp.StatusCode != 408 {
		t.Fatalf("a head stalled past the header timeout: %d, want 408", resp.StatusCode)
	}
}

// A config that offers acme-tls/1 has an ACME CA's TLS-ALPN-01 validation
// handshake completed and the connection closed, as RFC 8737 has it: a
// handshake, not a failure, and no request is read from it. Clients go on
// negotiating http/1.1.
func TestTLSACMEValidationHandshake(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hello"))
	site := newSite(t)
	obs := newTLSCounts()
	cfg := site.server()
	cfg.NextProtos = append(Protocols(), acmeTLS1)
	hs := startTLS(t, peers(testOptions(), up.Addr()), cfg, func(s *Server) { s.Observer = obs })

	c := hs.mustDialTLS(t, &tls.Config{ServerName: "example.com", InsecureSkipVerify: true, NextProtos: []string{acmeTLS1}})
	if p := c.nc.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != acmeTLS1 {
		t.Fatalf("negotiated %q, want %q", p, acmeTLS1)
	}
	c.send("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
	if !c.closed(5 * time.Second) {
		t.Error("the validation connection was not closed")
	}
	if n := obs.handshakes("1.3"); n != 1 {
		t.Errorf("%d handshakes counted, want 1", n)
	}
	if n := obs.failures(FailedALPN) + obs.failures(FailedOther); n != 0 {
		t.Errorf("the validation handshake was counted as a failure (%d)", n)
	}
	if len(up.Requests()) != 0 {
		t.Error("a request on the validation connection went upstream")
	}

	client := hs.mustDialTLS(t, &tls.Config{ServerName: "example.com", RootCAs: site.ca.Pool(), NextProtos: []string{"http/1.1", acmeTLS1}})
	if resp, body := client.roundTrip("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"); resp.StatusCode != 200 || body != "hello" {
		t.Errorf("a client offering http/1.1 and acme-tls/1: got %d %q", resp.StatusCode, body)
	}
}
