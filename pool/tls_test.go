package pool

import (
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// tlsPair returns a pooled TLS client connection, handshaken, with key
// "k", and the server's end of it, handshaken too. The server requests a
// client certificate, so that it sends its TLS 1.3 session ticket after
// the client's handshake is over: the ticket waits on the socket.
func tlsPair(t *testing.T, ln net.Listener) (*Conn, *tls.Conn, tls.ClientSessionCache) {
	t.Helper()
	ca := tlstest.NewCA(t, "pool test CA")
	srvCfg := &tls.Config{
		Certificates: []tls.Certificate{*ca.Server(t, "up.test").TLS},
		ClientAuth:   tls.RequestClientCert,
	}
	cache := tls.NewLRUClientSessionCache(1)
	cliCfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "up.test", ClientSessionCache: cache}
	c, s := pair(t, ln)
	pc := NewTLSConn(c, cliCfg, "k", &Limits{MaxIdle: 4, IdleTimeout: time.Minute}, time.Now())
	st := tls.Server(s, srvCfg)
	done := make(chan error, 1)
	go func() { done <- st.Handshake() }()
	if err := pc.TLS().Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(); st.Close() })
	return pc, st, cache
}

// waitRaw waits until the socket under c holds bytes or its end (the raw
// peek that a plain TCP connection's check makes says dead). It must not
// run while c is pooled.
func waitRaw(t *testing.T, c *Conn) {
	t.Helper()
	wait.For(t, "bytes on the socket", func() bool { return !c.sys.alive() })
}

// TestTLSCheckBeforeUse: the check before use of an idle TLS connection
// reads what arrived through TLS. A session ticket leaves it usable (and is
// stored); a close_notify, application data, or bytes that are not TLS
// make it dead. A peek of the raw socket would call every one of them
// dead.
func TestTLSCheckBeforeUse(t *testing.T) {
	tests := []struct {
		name   string
		server func(*tls.Conn) // what the server sends while the connection idles
		alive  bool
	}{
		{"session ticket", nil, true},
		{"close_notify", func(s *tls.Conn) { s.CloseWrite() }, false},
		{"application data", func(s *tls.Conn) { s.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n")) }, false},
		{"not TLS", func(s *tls.Conn) { s.NetConn().Write([]byte("garbage\r\n")) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln := listen(t)
			p := New(0, nil)
			defer p.Close()
			pc, srv, cache := tlsPair(t, ln)
			// The ticket comes after the client's handshake: the check
			// takes it and stores it, and the connection stays usable.
			waitRaw(t, pc)
			p.Put(pc)
			got := p.Get("k", nil)
			if got == nil {
				t.Fatalf("a connection with a session ticket waiting was found dead (stats %+v)", p.Stats())
			}
			if _, ok := cache.Get("up.test"); !ok {
				t.Fatal("the session ticket was not stored")
			}
			if tt.server != nil {
				tt.server(srv)
				waitRaw(t, got)
				p.Put(got)
				got = p.Get("k", nil)
			}
			if (got != nil) != tt.alive {
				t.Fatalf("Get returned a connection: %v, want %v (stats %+v)", got != nil, tt.alive, p.Stats())
			}
			if s := p.Stats(); tt.alive && s.Stale != 0 || !tt.alive && s.Stale != 1 {
				t.Errorf("stats %+v", s)
			}
			if !tt.alive {
				return
			}
			// The connection still carries an exchange, both ways.
			go func() {
				b := make([]byte, 64)
				n, _ := srv.Read(b)
				srv.Write([]byte("ok " + string(b[:n])))
			}()
			got.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := got.Send([]byte("ping"), time.Second); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 64)
			n, err := got.Read(b)
			if err != nil || string(b[:n]) != "ok ping" {
				t.Fatalf("read %q, %v", b[:n], err)
			}
		})
	}
}

// TestTLSWatcher: a TLS server that closes an idle pooled connection (its
// close_notify and FIN) or resets it has it removed while it idles on
// Linux, and found dead before use elsewhere.
func TestTLSWatcher(t *testing.T) {
	tests := []struct {
		name  string
		close func(*tls.Conn)
	}{
		{"close", func(s *tls.Conn) { s.Close() }},
		{"reset", func(s *tls.Conn) {
			s.NetConn().(*net.TCPConn).SetLinger(0)
			s.NetConn().Close()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln := listen(t)
			p := New(0, nil)
			defer p.Close()
			pc, srv, _ := tlsPair(t, ln)
			if runtime.GOOS != "linux" {
				// No watcher: the check before use finds it.
				tt.close(srv)
				waitRaw(t, pc)
				p.Put(pc)
				if p.Get("k", nil) != nil {
					t.Fatal("Get returned a connection its server closed")
				}
				return
			}
			waitRaw(t, pc) // the session ticket
			p.Put(pc)
			tt.close(srv)
			wait.For(t, "the watcher to remove the connection", func() bool { return p.Stats().Watched == 1 })
			if s := p.Stats(); s.Idle != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestTLSNowAndClose: Now reads the plaintext the TLS layer holds without
// waiting, and says so when there is none; Close sends a close_notify.
func TestTLSNowAndClose(t *testing.T) {
	ln := listen(t)
	pc, srv, _ := tlsPair(t, ln)
	if n, err := pc.Now().Read(make([]byte, 16)); n != 0 || err != ErrNothingYet {
		t.Fatalf("Now on a quiet connection: %d, %v; want 0, ErrNothingYet", n, err)
	}
	srv.Write([]byte("hello"))
	waitRaw(t, pc)
	b := make([]byte, 16)
	var got []byte
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(string(got), "hello") && time.Now().Before(deadline) {
		n, err := pc.Now().Read(b)
		got = append(got, b[:n]...)
		if err != nil && err != ErrNothingYet {
			t.Fatal(err)
		}
	}
	if string(got) != "hello" {
		t.Fatalf("Now read %q", got)
	}
	pc.Close()
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := srv.Read(b); n != 0 || err != io.EOF {
		t.Fatalf("the server read %d, %v after Close; want a close_notify (io.EOF)", n, err)
	}
}
