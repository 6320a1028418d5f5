package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h2"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/pool"
)

// h2Upstream is an HTTP/2 upstream made of sluice's own h2 server: each
// stream is answered by handle, and it counts the connections it accepted,
// and those that ended.
type h2Upstream struct {
	ln    net.Listener
	conns atomic.Int32
	ended atomic.Int32
	mu    sync.Mutex
	live  []*h2.Conn
}

func startH2Upstream(t testing.TB, cfg *tls.Config, settings *h2.Settings, handle func(c *h2.Conn, st *h2.Stream)) *h2Upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	return serveH2Upstream(t, ln, settings, handle)
}

// serveH2Upstream is startH2Upstream on a listener of the caller's.
func serveH2Upstream(t testing.TB, ln net.Listener, settings *h2.Settings, handle func(c *h2.Conn, st *h2.Stream)) *h2Upstream {
	u := &h2Upstream{ln: ln}
	var wg sync.WaitGroup
	// The accept loop counts too, so that its Adds never race with the
	// cleanup's Wait (an Add while the count may be zero).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if tc, ok := nc.(*tls.Conn); ok {
					if tc.Handshake() != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
						// An HTTP/1.1 client: answer it so.
						io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhttp1")
						nc.Close()
						return
					}
				}
				var c *h2.Conn
				c = h2.NewConn(nc, nil, settings, func(st *h2.Stream) { handle(c, st) })
				u.mu.Lock()
				u.live = append(u.live, c)
				u.mu.Unlock()
				c.Serve()
				u.ended.Add(1)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for _, c := range u.live {
			c.Close()
		}
		u.mu.Unlock()
		wg.Wait()
	})
	return u
}

func (u *h2Upstream) addr() string {
	if a, ok := u.ln.Addr().(*net.UnixAddr); ok {
		return "unix:" + a.Name
	}
	return u.ln.Addr().String()
}

// echoH2 answers with the request's method, path and body, and a trailer.
func echoH2(_ *h2.Conn, st *h2.Stream) {
	var method, path string
	for _, f := range st.Header() {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			path = f.Value
		}
	}
	body, err := io.ReadAll(st)
	if err != nil {
		return
	}
	st.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "text/plain"}}, false)
	io.WriteString(st, method+" "+path+" "+string(body))
	st.WriteTrailers([]hpack.HeaderField{{Name: "grpc-status", Value: "0"}})
}

func h2Options(proto string, t *TLS) *PeerOptions {
	o := testOptions()
	o.Protocol = proto
	o.TLS = t
	return o
}

// TestH2UpstreamRequests proxies HTTP/1.1 and HTTP/2 clients' requests to
// an HTTP/2 upstream, in the clear and over TLS: bodies with and without
// a length both ways, trailers relayed, and every request of a burst on
// one upstream connection.
func TestH2UpstreamRequests(t *testing.T) {
	ca := tlstest.NewCA(t, "upstream CA")
	srvTLS := &tls.Config{Certificates: []tls.Certificate{*ca.Server(t, "127.0.0.1").TLS}, NextProtos: []string{"h2", "http/1.1"}}
	for _, tt := range []struct {
		proto string
		cfg   *tls.Config
		tls   *TLS
	}{
		{ProtocolH2C, nil, nil},
		{ProtocolH2, srvTLS, &TLS{Config: &tls.Config{RootCAs: ca.Pool()}}},
		{ProtocolAuto, srvTLS, &TLS{Config: &tls.Config{RootCAs: ca.Pool()}}},
	} {
		t.Run(tt.proto, func(t *testing.T) {
			up := startH2Upstream(t, tt.cfg, nil, echoH2)
			hs, client := startH2(t, peers(h2Options(tt.proto, tt.tls), up.addr()), h2c())
			// HTTP/1.1 client, chunked body, trailers come back chunked.
			resp, body := hs.do(t, "POST /a?b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
			if resp.StatusCode != 200 || body != "POST /a?b abc" || resp.Trailer.Get("Grpc-Status") != "0" {
				t.Fatalf("HTTP/1.1 client: %d %q, trailers %v", resp.StatusCode, body, resp.Trailer)
			}
			// HTTP/2 clients, a burst with bodies of known length.
			var wg sync.WaitGroup
			errs := make(chan error, 40)
			for i := 0; i < 40; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					want := strings.Repeat("x", 100*i)
					resp, err := client.Post(fmt.Sprintf("http://%s/p%d", hs.addr, i), "text/plain", strings.NewReader(want))
					if err != nil {
						errs <- err
						return
					}
					got, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || string(got) != fmt.Sprintf("POST /p%d %s", i, want) || resp.Trailer.Get("Grpc-Status") != "0" {
						errs <- fmt.Errorf("stream %d: %d bytes, %v, trailers %v", i, len(got), err, resp.Trailer)
					}
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := up.conns.Load(); n != 1 {
				t.Errorf("%d upstream connections for 41 requests, want 1 (the server allows 250 streams)", n)
			}
		})
	}
}

// TestH2UpstreamAutoFallsBack: an auto peer whose server chooses
// http/1.1 is spoken to in HTTP/1.1; an h2 peer's try on it fails in the
// handshake, a connect failure: nothing sent.
func TestH2UpstreamAutoFallsBack(t *testing.T) {
	ca := tlstest.NewCA(t, "upstream CA")
	srvTLS := &tls.Config{Certificates: []tls.Certificate{*ca.Server(t, "127.0.0.1").TLS}, NextProtos: []string{"http/1.1"}}
	up := startH2Upstream(t, srvTLS, nil, echoH2)
	trust := &TLS{Config: &tls.Config{RootCAs: ca.Pool()}}
	hs := start(t, peers(h2Options(ProtocolAuto, trust), up.addr()))
	if code, body := hs.get(t, "/"); code != 200 || body != "http1" {
		t.Errorf("auto: %d %q, want the HTTP/1.1 answer", code, body)
	}
	hs2 := start(t, peers(h2Options(ProtocolH2, trust), up.addr()))
	resp, _ := hs2.do(t, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
	// Go's server refuses a client that offers only h2 with an alert
	// (no_application_protocol); one that ignores ALPN settles on none.
	if ps := resp.Header.Get("Proxy-Status"); resp.StatusCode != 502 ||
		!strings.Contains(ps, "tls_alert_received") && !strings.Contains(ps, "tls_protocol_error") {
		t.Errorf("h2 to a server without h2: %d %q", resp.StatusCode, resp.Header.Get("Proxy-Status"))
	}
}

// TestH2UpstreamRetryFacts: a POST the upstream refused (REFUSED_STREAM)
// is retried and processed once; a POST reset after it was read is not
// retried: 502 with Proxy-Status, sent once.
func TestH2UpstreamRetryFacts(t *testing.T) {
	var tries, processed atomic.Int32
	up := startH2Upstream(t, nil, nil, func(c *h2.Conn, st *h2.Stream) {
		n := tries.Add(1)
		var path string
		for _, f := range st.Header() {
			if f.Name == ":path" {
				path = f.Value
			}
		}
		switch {
		case path == "/refused" && n == 1:
			st.Reset(http2.ErrCodeRefusedStream)
		case path == "/reset":
			io.ReadAll(st)
			processed.Add(1)
			st.Reset(http2.ErrCodeInternal)
		default:
			io.ReadAll(st)
			processed.Add(1)
			st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-length", Value: "2"}}, []byte("ok"), true)
		}
	})
	hs := start(t, peers(h2Options(ProtocolH2C, nil), up.addr()))
	resp, body := hs.do(t, "POST /refused HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if resp.StatusCode != 200 || body != "ok" || tries.Load() != 2 || processed.Load() != 1 {
		t.Errorf("refused stream: %d %q after %d tries, processed %d times; want 200, 2 tries, processed once",
			resp.StatusCode, body, tries.Load(), processed.Load())
	}
	tries.Store(0)
	processed.Store(0)
	resp, _ = hs.do(t, "POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if resp.StatusCode != 502 || resp.Header.Get("Proxy-Status") == "" || tries.Load() != 1 {
		t.Errorf("reset after the request was read: %d %q after %d tries; want 502 with Proxy-Status, sent once",
			resp.StatusCode, resp.Header.Get("Proxy-Status"), tries.Load())
	}
}

// TestH2UpstreamGoAwayBurst: the upstream shuts its connection down
// gracefully (GOAWAY) in the middle of a burst of 100 POSTs: every POST is
// answered 200, none is processed twice, and the streams the GOAWAY left
// out go on a new connection.
func TestH2UpstreamGoAwayBurst(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	var started atomic.Int32
	// The first 20 streams are held open until the 20th has begun the
	// upstream's shutdown: the GOAWAY comes in the middle of the burst.
	deploy := make(chan struct{})
	up := startH2Upstream(t, nil, nil, func(c *h2.Conn, st *h2.Stream) {
		var path string
		for _, f := range st.Header() {
			if f.Name == ":path" {
				path = f.Value
			}
		}
		io.ReadAll(st)
		mu.Lock()
		seen[path]++
		mu.Unlock()
		switch n := started.Add(1); {
		case n < 20:
			<-deploy
		case n == 20:
			c.Shutdown() // a deploy
			close(deploy)
		}
		st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-length", Value: "2"}}, []byte("ok"), true)
	})
	hs, client := startH2(t, peers(h2Options(ProtocolH2C, nil), up.addr()), h2c())
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	base := "http://" + hs.addr
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := client.Post(fmt.Sprintf("%s/order/%d", base, i), "text/plain", strings.NewReader("item"))
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Errorf("order %d: %d %s", i, resp.StatusCode, resp.Header.Get("Proxy-Status"))
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for path, n := range seen {
		if n != 1 {
			t.Errorf("%s processed %d times", path, n)
		}
	}
	if len(seen) != 100 {
		t.Errorf("%d orders processed, want 100", len(seen))
	}
	// Whether the GOAWAY left streams out, to go on a new connection,
	// depends on how many were open when it came.
	t.Logf("%d upstream connections", up.conns.Load())
}

// TestH2UpstreamStreamsReleased: a burst of HTTP/2 clients' requests to an
// HTTP/2 upstream on one connection, half of them given up in the middle of
// the response body (the client's reset cuts the try's waits, and the try
// is dropped), the rest read to their trailers. Every response read is its
// own, though each try's stream is reused by a later one once released, and
// every upstream stream ends: the streams given up are reset by their
// release, and none is left open on the connection.
func TestH2UpstreamStreamsReleased(t *testing.T) {
	piece := func(path string) string { return strings.Repeat(path+";", 1000) }
	var ended atomic.Int32
	up := startH2Upstream(t, nil, nil, func(_ *h2.Conn, st *h2.Stream) {
		defer ended.Add(1)
		var path string
		for _, f := range st.Header() {
			if f.Name == ":path" {
				path = f.Value
			}
		}
		if st.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, false) != nil {
			return
		}
		if _, err := io.WriteString(st, piece(path)); err != nil {
			return
		}
		if strings.HasPrefix(path, "/cut/") {
			<-st.Done() // the rest would go nowhere: the proxy resets the stream
			return
		}
		if _, err := io.WriteString(st, piece(path)); err != nil {
			return
		}
		st.WriteTrailers([]hpack.HeaderField{{Name: "x-path", Value: path}})
	})
	hs, client := startH2(t, peers(h2Options(ProtocolH2C, nil), up.addr()), h2c())
	const n = 40
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs <- fetchOrCut(client, hs.addr, i, piece) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	wait.For(t, "every upstream stream to end", func() bool { return ended.Load() == n })
	wait.For(t, "no stream left open on the upstream connections", func() bool {
		m := hs.srv.mux
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, list := range m.conns {
			for _, c := range list {
				if c.cc.Active() != 0 {
					return false
				}
			}
		}
		return true
	})
}

// fetchOrCut asks for path /full/i, read whole with its trailers, or, for
// an even i, /cut/i, given up once its first piece is read; it checks that
// what it read is path's.
func fetchOrCut(client *http.Client, addr string, i int, piece func(string) string) error {
	path := fmt.Sprintf("/full/%d", i)
	cut := i%2 == 0
	if cut {
		path = fmt.Sprintf("/cut/%d", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	want := piece(path)
	if cut {
		got := make([]byte, len(want))
		if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != want {
			return fmt.Errorf("%s: first piece %.40q..., %v", path, got, err)
		}
		return nil // cancel resets the stream
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || string(got) != want+want || resp.Trailer.Get("X-Path") != path {
		return fmt.Errorf("%s: %d bytes (%.40q...), trailer %q, %v", path, len(got), got, resp.Trailer.Get("X-Path"), err)
	}
	return nil
}

// TestMuxSetClosesIdle: an HTTP/2 connection to an upstream is shut down
// once idle past its idle timeout, though no try comes any more: at the
// first sweep after, sweepEvery after the set got its first connection;
// and the server's key goes, and the sweeps stop, with its last
// connection. On synctest's clock, over net.Pipe.
func TestMuxSetClosesIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cn, sn := net.Pipe()
		server := h2.NewConn(sn, nil, nil, func(*h2.Stream) {})
		served := make(chan error, 1)
		go func() { served <- server.Serve() }()
		var m muxSet
		mc := &muxConn{cc: h2.NewClientConn(cn, nil), nc: cn, limits: &pool.Limits{MaxIdle: 4, IdleTimeout: 100 * time.Millisecond}}
		added := time.Now()
		m.add("gone", mc)
		if got, _, _ := m.take("gone", time.Now()); got != mc {
			t.Fatal("a fresh connection was not taken")
		}
		<-mc.cc.Done()
		if d := time.Since(added); d != sweepEvery {
			t.Errorf("the idle connection was shut down after %v, want at the first sweep, %v", d, sweepEvery)
		}
		if err := <-served; err != nil {
			t.Errorf("the upstream's Serve: %v, want the graceful end the set's GOAWAY began", err)
		}
		synctest.Wait() // the sweep that shut it down is over
		m.mu.Lock()
		_, ok := m.conns["gone"]
		sweeping := m.sweeper != nil
		m.mu.Unlock()
		if ok || sweeping {
			t.Errorf("after its last connection: key kept %v, sweeps go on %v", ok, sweeping)
		}
		m.close()
	})
}

// A reload's new server shares the old one's HTTP/2 connections to
// upstreams (ShareUpstreamConns): its requests go on the connection the
// old one opened, the old one's Shutdown (twice, even) leaves it open, and
// the new one's closes it.
func TestH2UpstreamConnsShared(t *testing.T) {
	up := startH2Upstream(t, nil, nil, echoH2)
	h := peers(h2Options(ProtocolH2C, nil), up.addr())
	old := start(t, h)
	if code, body := old.get(t, "/a"); code != 200 || body != "GET /a " {
		t.Fatalf("through the old server: %d %q", code, body)
	}
	next := start(t, h, func(s *Server) { s.Pool = old.srv.Pool; s.ShareUpstreamConns(old.srv) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 2 {
		if err := old.srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := next.get(t, "/b"); code != 200 || body != "GET /b " {
		t.Fatalf("through the new server: %d %q", code, body)
	}
	if n := up.conns.Load(); n != 1 {
		t.Errorf("%d upstream connections, want the old server's one", n)
	}
	if err := next.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the shared connection closed by the last Shutdown", func() bool { return up.ended.Load() == 1 })
}
