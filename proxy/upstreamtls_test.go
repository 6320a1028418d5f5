package proxy

import (
	"crypto/tls"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/retry"
)

// certs are the test's certificate authorities and certificates: ca signs
// the upstreams' certificates (good, for 127.0.0.1 and up.test) and the
// client certificate sluice presents; other is a CA nobody trusts.
type certs struct {
	ca, other *tlstest.CA
	good      tls.Certificate
	client    tls.Certificate
}

func newCerts(t *testing.T) *certs {
	ca := tlstest.NewCA(t, "upstream CA")
	return &certs{
		ca:     ca,
		other:  tlstest.NewCA(t, "other CA"),
		good:   *ca.Server(t, "127.0.0.1", "up.test").TLS,
		client: *ca.Client(t, "sluice").TLS,
	}
}

// tlsOptions are testOptions with connections made over TLS under cfg.
func tlsOptions(cfg *tls.Config) *PeerOptions {
	o := testOptions()
	o.TLS = &TLS{Config: cfg}
	return o
}

// whoAmI answers with how the TLS handshake went, as the upstream saw it:
// "sni=NAME resumed=BOOL client=CN".
func whoAmI() upstreamtest.Handler {
	return func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		st, _ := c.TLS()
		client := "-"
		if len(st.PeerCertificates) > 0 {
			client = st.PeerCertificates[0].Subject.CommonName
		}
		c.Respond(200, fmt.Sprintf("sni=%s resumed=%v client=%s", st.ServerName, st.DidResume, client))
	}
}

// TestTLSVerification: sluice verifies the upstream's certificate against
// the configured roots and the server name, sends the name as SNI (unless
// it is an IP address), and answers 502 tls_certificate_error, after one
// try, when it does not verify.
func TestTLSVerification(t *testing.T) {
	cs := newCerts(t)
	tests := []struct {
		name       string
		serverCert tls.Certificate
		client     *tls.Config
		serverName string // Peer.ServerName
		status     int
		body       string // the upstream's, for 200
		ps         string // Proxy-Status, for sluice's own answer
	}{
		{"private CA, the address's IP", cs.good, &tls.Config{RootCAs: cs.ca.Pool()}, "", 200, "sni= resumed=false client=-", ""},
		{"private CA, server_name", *cs.ca.Server(t, "up.test").TLS, &tls.Config{RootCAs: cs.ca.Pool(), ServerName: "up.test"}, "", 200, "sni=up.test resumed=false client=-", ""},
		{"private CA, the peer's name", *cs.ca.Server(t, "up.test").TLS, &tls.Config{RootCAs: cs.ca.Pool()}, "up.test", 200, "sni=up.test resumed=false client=-", ""},
		{"server_name wins over the peer's", *cs.ca.Server(t, "up.test").TLS, &tls.Config{RootCAs: cs.ca.Pool(), ServerName: "up.test"}, "other.test", 200, "sni=up.test resumed=false client=-", ""},
		{"unknown authority", *cs.other.Server(t, "127.0.0.1").TLS, &tls.Config{RootCAs: cs.ca.Pool()}, "", 502, "", `sluice; error=tls_certificate_error; details="1 try: tls_certificate_error"`},
		{"system roots", cs.good, nil, "", 502, "", `sluice; error=tls_certificate_error; details="1 try: tls_certificate_error"`},
		{"wrong name", *cs.ca.Server(t, "up.test").TLS, &tls.Config{RootCAs: cs.ca.Pool()}, "", 502, "", `sluice; error=tls_certificate_error; details="1 try: tls_certificate_error"`},
		{"insecure_skip_verify", *cs.other.Server(t, "elsewhere.test").TLS, &tls.Config{InsecureSkipVerify: true, ServerName: "up.test"}, "", 200, "sni=up.test resumed=false client=-", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{tt.serverCert}}, whoAmI())
			opts := tlsOptions(tt.client)
			hs := start(t, &ordered{peers: []*Peer{{Addr: up.Addr(), ServerName: tt.serverName, Options: opts}}})
			resp, body := hs.do(t, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			if tt.status == 200 && body != tt.body {
				t.Fatalf("the upstream saw %q, want %q", body, tt.body)
			}
			if got := resp.Header.Get("Proxy-Status"); got != tt.ps {
				t.Fatalf("Proxy-Status %q, want %q", got, tt.ps)
			}
			if tt.status == 502 {
				// Three tries allowed, one made: the same certificate
				// would fail the same way.
				if up.Accepts() != 1 {
					t.Fatalf("the upstream took %d connections, want 1", up.Accepts())
				}
				if !strings.Contains(hs.errors.String(), "certificate") {
					t.Fatalf("the log does not say why:\n%s", hs.errors)
				}
			}
		})
	}
}

// TestTLSFailureRetriedElsewhere: a TLS failure sent nothing of the
// request, so it is retried on another server whatever the method: the
// POST without a key, under non_idempotent: never, reaches B once. A
// certificate error or a refusal excludes its server; a failed handshake
// (which a restart or a full accept queue can cause) does not.
func TestTLSFailureRetriedElsewhere(t *testing.T) {
	cs := newCerts(t)
	good := &tls.Config{Certificates: []tls.Certificate{cs.good}}
	client := &tls.Config{RootCAs: cs.ca.Pool()}
	tests := []struct {
		name    string
		a       func(t *testing.T) string // A's address
		aStatus string                    // A's part in upstream_status
	}{
		{"certificate error", func(t *testing.T) string {
			return upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{*cs.other.Server(t, "127.0.0.1").TLS}}, nil).Addr()
		}, "tls_certificate_error"},
		{"plain TCP server", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.OK("plain")).Addr() }, "tls_handshake_error"},
		{"reset in the handshake", func(t *testing.T) string { return resetOnHello(t) }, "tls_handshake_error"},
		{"client certificate required (TLS 1.3)", func(t *testing.T) string {
			return upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{cs.good},
				ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: cs.ca.Pool()}, nil).Addr()
		}, "tls_alert_received"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := upstreamtest.StartTLS(t, good, upstreamtest.OK("B"))
			opts := tlsOptions(client)
			opts.Retry = &retry.Policy{NonIdempotent: retry.Never}
			hs := start(t, inOrder(opts, tt.a(t), b.Addr()))
			resp, body := hs.do(t, "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
			if resp.StatusCode != 200 || body != "B" {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
			if n := b.Count("POST", "/p"); n != 1 {
				t.Fatalf("B saw the POST %d times", n)
			}
			wait.For(t, "the access log line", func() bool {
				return strings.Contains(hs.access.String(), "upstream_status="+logValue(tt.aStatus+", 200")+" ")
			})
		})
	}
}

// resetOnHello returns the address of a server that resets each
// connection once the client hello arrives.
func resetOnHello(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Read(make([]byte, 1))
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// TestTLSOneServerFailures: with one server and three tries, what each
// TLS failure costs and answers. A failed handshake is retried on the same
// server (nothing was sent, and it may pass next time); a certificate
// error or a refusal is not, as it would not.
func TestTLSOneServerFailures(t *testing.T) {
	cs := newCerts(t)
	tests := []struct {
		name     string
		server   *tls.Config // nil: a plain TCP server
		client   *tls.Config
		accepts  int
		ps       string
		upstream string // upstream_status in the access log
	}{
		{"plain TCP server", nil, &tls.Config{RootCAs: cs.ca.Pool()}, 3,
			`sluice; error=tls_protocol_error; details="3 tries: tls_handshake_error, tls_handshake_error, tls_handshake_error"`,
			"tls_handshake_error, tls_handshake_error, tls_handshake_error"},
		{"client certificate missing, TLS 1.3", &tls.Config{Certificates: []tls.Certificate{cs.good},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: cs.ca.Pool()}, &tls.Config{RootCAs: cs.ca.Pool()}, 1,
			`sluice; error=tls_alert_received; alert-id=116; alert-message="certificate_required"; details="1 try: tls_alert_received"`,
			"tls_alert_received"},
		{"client certificate missing, TLS 1.2", &tls.Config{Certificates: []tls.Certificate{cs.good}, MaxVersion: tls.VersionTLS12,
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: cs.ca.Pool()}, &tls.Config{RootCAs: cs.ca.Pool()}, 1,
			`sluice; error=tls_alert_received; alert-id=40; alert-message="handshake_failure"; details="1 try: tls_alert_received"`,
			"tls_alert_received"},
		{"client certificate from another CA", &tls.Config{Certificates: []tls.Certificate{cs.good},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: cs.ca.Pool()},
			&tls.Config{RootCAs: cs.ca.Pool(), GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				stranger := *cs.other.Client(t, "stranger").TLS
				return &stranger, nil
			}}, 1,
			`sluice; error=tls_alert_received; alert-id=48; alert-message="unknown_ca"; details="1 try: tls_alert_received"`,
			"tls_alert_received"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var up *upstreamtest.Server
			if tt.server == nil {
				up = upstreamtest.Start(t, nil)
			} else {
				up = upstreamtest.StartTLS(t, tt.server, nil)
			}
			hs := start(t, inOrder(tlsOptions(tt.client), up.Addr()))
			resp, _ := hs.do(t, "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
			if resp.StatusCode != 502 || resp.Header.Get("Proxy-Status") != tt.ps {
				t.Fatalf("got %d %q\nwant 502 %q", resp.StatusCode, resp.Header.Get("Proxy-Status"), tt.ps)
			}
			if up.Accepts() != tt.accepts || len(up.Requests()) != 0 {
				t.Fatalf("the upstream took %d connections and %d requests, want %d and none",
					up.Accepts(), len(up.Requests()), tt.accepts)
			}
			wait.For(t, "the access log line", func() bool {
				return strings.Contains(hs.access.String(), "upstream_status="+logValue(tt.upstream)+" ")
			})
		})
	}
}

// TestTLSClientCertificate: a client certificate in the config is what
// the upstream sees, and sluice gets through an upstream that requires
// one.
func TestTLSClientCertificate(t *testing.T) {
	cs := newCerts(t)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			up := upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{cs.good}, MaxVersion: v,
				ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: cs.ca.Pool()}, whoAmI())
			hs := start(t, inOrder(tlsOptions(&tls.Config{RootCAs: cs.ca.Pool(), Certificates: []tls.Certificate{cs.client}}), up.Addr()))
			if status, body := hs.get(t, "/"); status != 200 || body != "sni= resumed=false client=sluice" {
				t.Fatalf("got %d %q", status, body)
			}
		})
	}
}

// TestTLSSessionResumption: a new connection to a server resumes the TLS
// session of the one before (the upstream sees DidResume), in TLS 1.3 and
// 1.2, and pooled connections carry request after request though the
// server sent session tickets on them.
func TestTLSSessionResumption(t *testing.T) {
	cs := newCerts(t)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			up := upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{cs.good}, MaxVersion: v}, whoAmI())
			opts := tlsOptions(&tls.Config{RootCAs: cs.ca.Pool(), ServerName: "up.test"})
			opts.Pool.MaxIdle = 0 // a new connection per request
			hs := start(t, inOrder(opts, up.Addr()))
			for i, want := range []string{"resumed=false", "resumed=true", "resumed=true"} {
				if status, body := hs.get(t, "/"); status != 200 || !strings.Contains(body, want) {
					t.Fatalf("request %d: got %d %q, want %s", i+1, status, body, want)
				}
			}
			if up.Accepts() != 3 {
				t.Fatalf("%d connections, want 3", up.Accepts())
			}

			pooled := upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{cs.good}, MaxVersion: v}, whoAmI())
			hs = start(t, inOrder(tlsOptions(&tls.Config{RootCAs: cs.ca.Pool()}), pooled.Addr()))
			c := hs.dial(t)
			for i := 0; i < 20; i++ {
				if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
					t.Fatalf("request %d: %d", i+1, resp.StatusCode)
				}
			}
			if s := hs.srv.Pool.Stats(); pooled.Accepts() != 1 || s.Hits != 19 || s.Stale != 0 {
				t.Fatalf("%d connections for 20 requests, pool %+v; want one connection, 19 hits", pooled.Accepts(), s)
			}
		})
	}
}

// TestTLSPoolKeys: pooled connections are shared only by peers of the same
// address, server name and TLS settings: a connection verified under one
// CA is never handed to a peer configured with another.
func TestTLSPoolKeys(t *testing.T) {
	cs := newCerts(t)
	up := upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{cs.good}}, whoAmI())
	both := cs.ca.Pool()
	both.AddCert(cs.other.Cert)
	shared := &TLS{Config: &tls.Config{RootCAs: cs.ca.Pool()}}
	optsWith := func(t *TLS) *PeerOptions {
		o := testOptions()
		o.TLS = t
		return o
	}
	tests := []struct {
		name   string
		a, b   *Peer
		shared bool
	}{
		{"one TLS value", &Peer{Addr: up.Addr(), Options: optsWith(shared)}, &Peer{Addr: up.Addr(), Options: optsWith(shared)}, true},
		{"another CA", &Peer{Addr: up.Addr(), Options: optsWith(shared)},
			&Peer{Addr: up.Addr(), Options: optsWith(&TLS{Config: &tls.Config{RootCAs: both}})}, false},
		{"equal settings, no IDs", &Peer{Addr: up.Addr(), Options: optsWith(&TLS{Config: &tls.Config{RootCAs: cs.ca.Pool()}})},
			&Peer{Addr: up.Addr(), Options: optsWith(&TLS{Config: &tls.Config{RootCAs: cs.ca.Pool()}})}, false},
		{"equal settings, equal IDs", &Peer{Addr: up.Addr(), Options: optsWith(&TLS{Config: &tls.Config{RootCAs: cs.ca.Pool()}, ID: "ca"})},
			&Peer{Addr: up.Addr(), Options: optsWith(&TLS{Config: &tls.Config{RootCAs: cs.ca.Pool()}, ID: "ca"})}, true},
		{"a client certificate", &Peer{Addr: up.Addr(), Options: optsWith(shared)},
			&Peer{Addr: up.Addr(), Options: optsWith(&TLS{Config: &tls.Config{RootCAs: cs.ca.Pool(), Certificates: []tls.Certificate{cs.client}}})}, false},
		{"another server name", &Peer{Addr: up.Addr(), Options: optsWith(shared)},
			&Peer{Addr: up.Addr(), ServerName: "up.test", Options: optsWith(shared)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var which atomic.Pointer[Peer]
			which.Store(tt.a)
			hs := start(t, handlerFunc(func(*Session) (*Peer, error) { return which.Load(), nil }))
			before := up.Accepts()
			if status, _ := hs.get(t, "/"); status != 200 {
				t.Fatalf("through a: %d", status)
			}
			which.Store(tt.b)
			if status, _ := hs.get(t, "/"); status != 200 {
				t.Fatalf("through b: %d", status)
			}
			if got := up.Accepts() - before; (got == 1) != tt.shared {
				t.Fatalf("%d connections for the two peers (keys %q and %q); shared: %v", got, tt.a.PoolKey(), tt.b.PoolKey(), tt.shared)
			}
		})
	}
}

// watcherRuns is set where the pool's idle watcher runs.
var watcherRuns = runtime.GOOS == "linux"

// logValue is v as the access log's text handler writes it.
func logValue(v string) string {
	if strings.Contains(v, " ") {
		return strconv.Quote(v)
	}
	return v
}

type handlerFunc func(*Session) (*Peer, error)

func (f handlerFunc) UpstreamPeer(s *Session) (*Peer, error) { return f(s) }

// TestTLSIdleClose: an upstream that closes an idle pooled TLS connection
// has it removed before a request can take it: with its close_notify and
// FIN, by the watcher (Linux); with a close_notify alone, which the
// watcher cannot see, by the check before use. Either way no try fails.
func TestTLSIdleClose(t *testing.T) {
	cs := newCerts(t)
	for _, notifyOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("close_notify only=%v", notifyOnly), func(t *testing.T) {
			closeNow := make(chan struct{})
			up := upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{cs.good}}, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
				c.Respond(200, fmt.Sprintf("conn %d", c.N()))
				if c.N() != 1 {
					return
				}
				select {
				case <-closeNow:
				case <-c.Done():
					return
				}
				if notifyOnly {
					c.CloseNotify()
				} else {
					c.Close()
				}
			})
			peer := &Peer{Addr: up.Addr(), Options: tlsOptions(&tls.Config{RootCAs: cs.ca.Pool()})}
			hs := start(t, &ordered{peers: []*Peer{peer}})
			if _, body := hs.get(t, "/1"); body != "conn 1" {
				t.Fatalf("first request: %q", body)
			}
			wait.For(t, "the connection to be pooled", func() bool { return hs.srv.Pool.Stats().Idle == 1 })
			close(closeNow)
			if notifyOnly || !watcherRuns {
				// Only the check before use can find it: take and give
				// back the connection until the check does.
				wait.For(t, "the check before use to find the close_notify", func() bool {
					pc := hs.srv.Pool.Get(peer.PoolKey(), nil)
					if pc == nil {
						return true
					}
					hs.srv.Pool.Put(pc)
					return false
				})
			} else {
				wait.For(t, "the watcher", func() bool { return hs.srv.Pool.Stats().Watched == 1 })
			}
			if _, body := hs.get(t, "/2"); body != "conn 2" {
				t.Fatalf("second request: %q", body)
			}
			if strings.Contains(hs.errors.String(), "upstream try failed") {
				t.Fatalf("a try failed:\n%s", hs.errors)
			}
		})
	}
}

// TestSeed000TLS replays seed 000 over TLS: an upstream that answers the
// first request of each connection and closes (close_notify and FIN) or
// resets on the second. A pooled TLS connection its server closed is a
// stale connection as over TCP: the GET is resent on a new connection, the
// POST without a key is not, the keyed POST is.
func TestSeed000TLS(t *testing.T) {
	cs := newCerts(t)
	get := "GET /g HTTP/1.1\r\nHost: a\r\n\r\n"
	post := func(key string) string {
		k := ""
		if key != "" {
			k = "Idempotency-Key: " + key + "\r\n"
		}
		return "POST /p HTTP/1.1\r\nHost: a\r\n" + k + "Content-Length: 3\r\n\r\nx=1"
	}
	tests := []struct {
		name   string
		req    string
		status int
		sends  int
		ps     string
	}{
		{"GET", get, 200, 2, ""},
		{"POST", post(""), 502, 1, `sluice; error=connection_terminated; details="1 try: connection_closed"`},
		{"keyed POST", post("k1"), 200, 2, ""},
	}
	for _, reset := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/reset=%v", tt.name, reset), func(t *testing.T) {
				up := upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{cs.good}}, upstreamtest.DropReused(reset))
				hs := start(t, inOrder(tlsOptions(&tls.Config{RootCAs: cs.ca.Pool()}), up.Addr()))
				c := hs.dial(t)
				c.roundTrip("GET /warm HTTP/1.1\r\nHost: a\r\n\r\n")
				resp, _ := c.roundTrip(tt.req)
				ps := tt.ps
				if reset {
					ps = strings.Replace(ps, "connection_closed", "connection_reset", 1)
				}
				if resp.StatusCode != tt.status || resp.Header.Get("Proxy-Status") != ps {
					t.Fatalf("got %d %q, want %d %q", resp.StatusCode, resp.Header.Get("Proxy-Status"), tt.status, ps)
				}
				method, _, _ := strings.Cut(tt.req, " ")
				path := "/g"
				if method == "POST" {
					path = "/p"
				}
				if n := up.Count(method, path); n != tt.sends {
					t.Fatalf("the upstream saw it %d times, want %d", n, tt.sends)
				}
			})
		}
	}
}

// TestTLSLargeBodies: request and response bodies larger than a TLS record
// go through whole, both ways, on a pooled connection.
func TestTLSLargeBodies(t *testing.T) {
	cs := newCerts(t)
	up := upstreamtest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{cs.good}}, upstreamtest.Echo())
	hs := start(t, inOrder(tlsOptions(&tls.Config{RootCAs: cs.ca.Pool()}), up.Addr()))
	c := hs.dial(t)
	for _, size := range []int{10, 40 << 10, 300 << 10} {
		body := strings.Repeat("0123456789abcdef", size/16+1)[:size]
		resp, got := c.roundTrip(fmt.Sprintf("PUT /f HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", size, body))
		if resp.StatusCode != 200 || got != body {
			t.Fatalf("%d bytes: status %d, %d bytes back", size, resp.StatusCode, len(got))
		}
	}
	if up.Accepts() != 1 {
		t.Fatalf("%d connections, want 1", up.Accepts())
	}
	c.send("PUT /chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	if resp, got := c.response("PUT"); resp.StatusCode != 200 || got != "hello" {
		t.Fatalf("chunked: %d %q", resp.StatusCode, got)
	}
}

// connectHooks is a Handler of one peer that records what its
// FailToConnect and ErrorWhileProxy hooks see.
type connectHooks struct {
	peer *Peer
	mu   sync.Mutex
	seen []string
}

func (h *connectHooks) UpstreamPeer(*Session) (*Peer, error) { return h.peer, nil }

func (h *connectHooks) FailToConnect(_ *Session, _ *Peer, e *fault.Error, f retry.Facts) *fault.Error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, fmt.Sprintf("FailToConnect %s wrote>0=%v", e.Kind, f.Wrote > 0))
	return nil
}

func (h *connectHooks) ErrorWhileProxy(_ *Session, _ *Peer, e *fault.Error, _ retry.Facts) *fault.Error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, "ErrorWhileProxy "+e.Kind.String())
	return nil
}

// TestTLSFailuresAreConnectFailures: the hooks see a failed handshake as a
// failure to connect, TLS 1.3's refusal of the client certificate too,
// which comes after the request was written.
func TestTLSFailuresAreConnectFailures(t *testing.T) {
	cs := newCerts(t)
	tests := []struct {
		name   string
		server *tls.Config
		want   string
	}{
		{"certificate error", &tls.Config{Certificates: []tls.Certificate{*cs.other.Server(t, "127.0.0.1").TLS}},
			"FailToConnect tls_certificate_error wrote>0=false"},
		{"client certificate required (TLS 1.3)", &tls.Config{Certificates: []tls.Certificate{cs.good},
			ClientAuth: tls.RequireAnyClientCert}, "FailToConnect tls_alert_received wrote>0=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := upstreamtest.StartTLS(t, tt.server, nil)
			h := &connectHooks{peer: &Peer{Addr: up.Addr(), Options: tlsOptions(&tls.Config{RootCAs: cs.ca.Pool()})}}
			hs := start(t, h)
			if status, _ := hs.get(t, "/"); status != 502 {
				t.Fatalf("status %d", status)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.seen) != 1 || h.seen[0] != tt.want {
				t.Fatalf("hooks saw %q, want [%q]", h.seen, tt.want)
			}
		})
	}
}
