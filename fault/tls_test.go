package fault

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
)

// tlsServer accepts one connection on 127.0.0.1 and hands it to serve,
// and returns its address.
func tlsServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// TestClassifyTLS classifies the errors crypto/tls gives a client whose
// handshake, or first read after it, meets each kind of failure, from real
// handshakes on 127.0.0.1.
func TestClassifyTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	other := tlstest.NewCA(t, "other CA")
	good := *ca.Server(t, "127.0.0.1", "up.test").TLS
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "up.test"}
	// handshake serves cfg's TLS on the connection, and then reads until
	// the client goes.
	handshake := func(cfg *tls.Config) func(net.Conn) {
		return func(c net.Conn) {
			tc := tls.Server(c, cfg)
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if tc.Handshake() == nil {
				tc.Read(make([]byte, 1))
			}
		}
	}
	tests := []struct {
		name   string
		serve  func(net.Conn)
		client *tls.Config
		// phase is where the failure is met: PhaseHandshake, or a read
		// after a handshake that succeeded.
		phase  Phase
		want   Kind
		params string
	}{
		{"unknown authority", handshake(&tls.Config{Certificates: []tls.Certificate{*other.Server(t, "up.test").TLS}}),
			client, PhaseHandshake, TLSCertificate, ""},
		{"wrong name", handshake(&tls.Config{Certificates: []tls.Certificate{good}}),
			&tls.Config{RootCAs: ca.Pool(), ServerName: "other.test"}, PhaseHandshake, TLSCertificate, ""},
		{"plain HTTP server", func(c net.Conn) {
			c.Read(make([]byte, 512))
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		}, client, PhaseHandshake, TLSHandshake, ""},
		{"reset at the client hello", func(c net.Conn) {
			c.Read(make([]byte, 512))
			c.(*net.TCPConn).SetLinger(0)
		}, client, PhaseHandshake, TLSHandshake, ""},
		{"closed at the client hello", func(c net.Conn) { c.Read(make([]byte, 512)) },
			client, PhaseHandshake, TLSHandshake, ""},
		{"silent", func(c net.Conn) { io.Copy(io.Discard, c) },
			client, PhaseHandshake, ConnectTimeout, ""},
		{"no common version", handshake(&tls.Config{Certificates: []tls.Certificate{good}, MinVersion: tls.VersionTLS13}),
			&tls.Config{RootCAs: ca.Pool(), ServerName: "up.test", MaxVersion: tls.VersionTLS12}, PhaseHandshake, TLSAlert,
			`alert-id=70; alert-message="protocol_version"`},
		{"TLS 1.2 server requires a client certificate", handshake(&tls.Config{Certificates: []tls.Certificate{good},
			ClientAuth: tls.RequireAnyClientCert, MaxVersion: tls.VersionTLS12}),
			client, PhaseHandshake, TLSAlert, `alert-id=40; alert-message="handshake_failure"`},
		// TLS 1.3: the client's handshake is over before the server
		// judges its certificate; the refusal comes on the first read.
		{"TLS 1.3 server requires a client certificate", handshake(&tls.Config{Certificates: []tls.Certificate{good},
			ClientAuth: tls.RequireAnyClientCert}),
			client, PhaseReadHead, TLSAlert, `alert-id=116; alert-message="certificate_required"`},
		{"TLS 1.3 refusal read mid-body", handshake(&tls.Config{Certificates: []tls.Certificate{good},
			ClientAuth: tls.RequireAnyClientCert}),
			client, PhaseReadBody, ConnectionReset, ""},
		{"close_notify", func(c net.Conn) {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{good}})
			if tc.Handshake() == nil {
				tc.Close()
			}
		}, client, PhaseReadHead, ConnectionClosed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := tlsServer(t, tt.serve)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tc := tls.Client(c, tt.client)
			tc.SetDeadline(time.Now().Add(300 * time.Millisecond))
			err = tc.Handshake()
			if tt.phase != PhaseHandshake {
				if err != nil {
					t.Fatalf("handshake: %v", err)
				}
				tc.SetDeadline(time.Now().Add(5 * time.Second))
				_, err = tc.Read(make([]byte, 1))
			}
			if err == nil {
				t.Fatal("no error")
			}
			e := FromIO(err, tt.phase)
			if e.Kind != tt.want || e.Source != Upstream {
				t.Fatalf("FromIO(%v) = %v from %v, want %v from upstream", err, e.Kind, e.Source, tt.want)
			}
			if got := e.ProxyStatusParams(); got != tt.params {
				t.Errorf("ProxyStatusParams() = %q, want %q", got, tt.params)
			}
		})
	}
}

func TestTLSAnswers(t *testing.T) {
	tests := []struct {
		kind Kind
		ps   string
	}{
		{TLSHandshake, "tls_protocol_error"},
		{TLSAlert, "tls_alert_received"},
		{TLSCertificate, "tls_certificate_error"},
	}
	for _, tt := range tests {
		e := New(tt.kind, Upstream, nil)
		if e.Answer() != 502 || e.ProxyStatus() != tt.ps || !tt.kind.Connect() || !tt.kind.TLS() {
			t.Errorf("%v: %d %s, connect %v; want 502 %s, a connect failure", tt.kind, e.Answer(), e.ProxyStatus(), tt.kind.Connect(), tt.ps)
		}
	}
}
