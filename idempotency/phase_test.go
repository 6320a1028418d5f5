package idempotency_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluice-proxy/sluice/idempotency"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/retry"
	"github.com/sluice-proxy/sluice/route"
)

// orders is an upstream that creates an order per request it processes,
// and does not deduplicate: what the layer is for.
type orders struct {
	n     atomic.Int32
	up    *upstreamtest.Server
	hold  chan struct{} // when not nil, an answer waits for it
	reset bool          // read the request, process it, and reset instead of answering
}

func startOrders(t *testing.T, o *orders) *orders {
	o.up = upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		n := o.n.Add(1)
		if o.hold != nil {
			<-o.hold
		}
		if o.reset {
			c.Reset()
			return
		}
		c.Respond(201, "order "+string(rune('0'+n))+" for "+string(r.Decoded), upstreamtest.Field{Name: "X-Order", Value: "yes"})
	})
	return o
}

// serve runs a proxy whose one route forwards to addr through layer.
func serve(t testing.TB, layer *idempotency.Layer, addr string, opts *proxy.PeerOptions) string {
	if opts == nil {
		opts = &proxy.PeerOptions{ResponseHeaderTimeout: 2 * time.Second, Retry: &retry.Policy{}}
	}
	tbl := route.New(route.Route{Name: "api", Upstream: proxytest.Peer{P: &proxy.Peer{Addr: addr, Options: opts}},
		Phases: []any{layer.Phase()}})
	return proxytest.Serve(t, &proxy.Server{Handler: tbl, ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func newLayer(t testing.TB, o idempotency.Options) *idempotency.Layer {
	l, err := idempotency.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-l.Close() })
	return l
}

func post(key, body string) string {
	req := "POST /orders HTTP/1.1\r\nHost: shop\r\nContent-Length: " + itoa(len(body)) + "\r\n"
	if key != "" {
		req += "Idempotency-Key: " + key + "\r\n"
	}
	return req + "\r\n" + body
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestPhaseKeepsAndReplays: the first keyed POST is processed and its
// answer kept; its retry gets that answer byte for byte without reaching
// the upstream; the key with another body gets 422; a request without a
// key passes untouched.
func TestPhaseKeepsAndReplays(t *testing.T) {
	o := startOrders(t, &orders{})
	addr := serve(t, newLayer(t, idempotency.Options{}), o.up.Addr(), nil)
	first, body := proxytest.Do(t, addr, post("k1", "book"))
	if first.StatusCode != 201 || body != "order 1 for book" {
		t.Fatalf("first: %d %q", first.StatusCode, body)
	}
	// The answer is kept as the request ends: wait for the store.
	var again *http.Response
	wait.For(t, "the answer replayed", func() bool {
		again, body = proxytest.Do(t, addr, post("k1", "book"))
		return again.StatusCode == 201
	})
	if body != "order 1 for book" || again.Header.Get("Idempotent-Replayed") != "true" || again.Header.Get("X-Order") != "yes" {
		t.Errorf("retry: %d %q %v", again.StatusCode, body, again.Header)
	}
	if resp, _ := proxytest.Do(t, addr, post("k1", "pen")); resp.StatusCode != 422 || resp.Header.Get("Proxy-Status") == "" {
		t.Errorf("the key with another body: %d %q, want 422 with Proxy-Status", resp.StatusCode, resp.Header.Get("Proxy-Status"))
	}
	if resp, _ := proxytest.Do(t, addr, post("", "book")); resp.StatusCode != 201 {
		t.Errorf("without a key: %d", resp.StatusCode)
	}
	if n := o.n.Load(); n != 2 {
		t.Errorf("the upstream processed %d requests, want 2 (the first keyed one and the unkeyed one)", n)
	}
}

// TestPhaseKeyField: the phase finds the key's field once and Begin takes
// it from there: with Required, a POST without the key gets 400 and one
// with the key twice gets 400 (neither reaches the upstream), a key in
// another case than the configured name's is the key, and a GET passes.
func TestPhaseKeyField(t *testing.T) {
	o := startOrders(t, &orders{})
	addr := serve(t, newLayer(t, idempotency.Options{Required: true}), o.up.Addr(), nil)
	twice := "POST /orders HTTP/1.1\r\nHost: shop\r\nIdempotency-Key: a\r\nContent-Length: 4\r\nidempotency-key: a\r\n\r\nbook"
	for _, tt := range []struct {
		name, req string
		status    int
	}{
		{"no key", post("", "book"), 400},
		{"two keys", twice, 400},
		{"the key in another case", strings.Replace(post("k1", "book"), "Idempotency-Key", "IDEMPOTENCY-key", 1), 201},
		{"a GET", "GET /orders HTTP/1.1\r\nHost: shop\r\n\r\n", 201},
	} {
		if resp, _ := proxytest.Do(t, addr, tt.req); resp.StatusCode != tt.status {
			t.Errorf("%s: %d, want %d", tt.name, resp.StatusCode, tt.status)
		}
	}
	if n := o.n.Load(); n != 2 {
		t.Errorf("the upstream processed %d requests, want 2 (the keyed POST and the GET)", n)
	}
}

// TestPhaseInFlight: a retry while the first request runs gets 409 with
// Retry-After, and the upstream sees the request once.
func TestPhaseInFlight(t *testing.T) {
	o := startOrders(t, &orders{hold: make(chan struct{})})
	addr := serve(t, newLayer(t, idempotency.Options{}), o.up.Addr(), nil)
	done := make(chan int)
	go func() {
		resp, _ := proxytest.Do(t, addr, post("k2", "book"))
		done <- resp.StatusCode
	}()
	wait.For(t, "the first request upstream", func() bool { return o.n.Load() == 1 })
	resp, _ := proxytest.Do(t, addr, post("k2", "book"))
	if resp.StatusCode != 409 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("while the first runs: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(o.hold)
	if st := <-done; st != 201 {
		t.Errorf("the first: %d", st)
	}
	if n := o.n.Load(); n != 1 {
		t.Errorf("the upstream processed %d requests, want 1", n)
	}
}

// TestPhaseUnknownOutcome: an upstream that reads the POST and resets may
// have processed it: the client gets 502, a retry with the key gets 502
// saying the outcome is unknown, and nothing is sent again.
func TestPhaseUnknownOutcome(t *testing.T) {
	o := startOrders(t, &orders{reset: true})
	addr := serve(t, newLayer(t, idempotency.Options{}), o.up.Addr(), nil)
	if resp, _ := proxytest.Do(t, addr, post("k3", "book")); resp.StatusCode != 502 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	var resp *http.Response
	var body string
	wait.For(t, "the outcome kept as unknown", func() bool {
		resp, body = proxytest.Do(t, addr, post("k3", "book"))
		return resp.StatusCode == 502 && strings.Contains(body, "unknown")
	})
	if n := o.n.Load(); n != 1 {
		t.Errorf("the upstream got %d requests, want 1", n)
	}
}

// TestPhaseUnsentReleases: a try that provably never reached the upstream
// (connection refused) releases the key, so that the retry goes through.
func TestPhaseUnsentReleases(t *testing.T) {
	o := startOrders(t, &orders{})
	var live atomic.Bool
	dead := upstreamtest.Dead(t)
	opts := &proxy.PeerOptions{ResponseHeaderTimeout: 2 * time.Second, Retry: &retry.Policy{Tries: 1}}
	tbl := route.New(route.Route{Name: "api", Upstream: pickFunc(func(*proxy.Session) (*proxy.Peer, error) {
		if live.Load() {
			return &proxy.Peer{Addr: o.up.Addr(), Options: opts}, nil
		}
		return &proxy.Peer{Addr: dead, Options: opts}, nil
	}), Phases: []any{newLayer(t, idempotency.Options{}).Phase()}})
	addr := proxytest.Serve(t, &proxy.Server{Handler: tbl, ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if resp, _ := proxytest.Do(t, addr, post("k4", "book")); resp.StatusCode != 502 {
		t.Fatalf("first, upstream down: %d", resp.StatusCode)
	}
	live.Store(true)
	wait.For(t, "the retry through", func() bool {
		resp, _ := proxytest.Do(t, addr, post("k4", "book"))
		return resp.StatusCode == 201
	})
	if n := o.n.Load(); n != 1 {
		t.Errorf("the upstream processed %d requests, want 1", n)
	}
}

type pickFunc func(*proxy.Session) (*proxy.Peer, error)

func (f pickFunc) Pick(s *proxy.Session) (*proxy.Peer, error) { return f(s) }

// TestPhaseClientGivesUp: a client that leaves before the answer does not
// end its claimed request: the answer is read to its end and kept, and the
// client's retry gets it without a second order. An HTTP/2 client's reset
// of its stream would otherwise cut the try at once.
func TestPhaseClientGivesUp(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		t.Run(proto, func(t *testing.T) {
			o := startOrders(t, &orders{hold: make(chan struct{})})
			tbl := route.New(route.Route{Name: "api", Upstream: proxytest.Peer{P: &proxy.Peer{Addr: o.up.Addr(),
				Options: &proxy.PeerOptions{ResponseHeaderTimeout: 2 * time.Second, Retry: &retry.Policy{}}}},
				Phases: []any{newLayer(t, idempotency.Options{}).Phase()}})
			srv := &proxy.Server{Handler: tbl, ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.ServeWith(ln, proxy.ListenerOptions{Protocols: []string{"http/1.1", "h2c"}})
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(ctx)
			})
			addr := ln.Addr().String()
			if proto == "HTTP/1.1" {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				io.WriteString(nc, post("k5", "book"))
				wait.For(t, "the request upstream", func() bool { return o.n.Load() == 1 })
				nc.Close() // the client times out and leaves
			} else {
				tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, addr)
				}}
				defer tr.CloseIdleConnections()
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/orders", strings.NewReader("book"))
				req.Header.Set("Idempotency-Key", "k5")
				req.Host = "shop" // as the retry's: the host is part of the payload's fingerprint
				errc := make(chan error, 1)
				go func() {
					_, err := tr.RoundTrip(req)
					errc <- err
				}()
				wait.For(t, "the request upstream", func() bool { return o.n.Load() == 1 })
				cancel() // the client resets its stream
				<-errc
			}
			close(o.hold)
			var resp *http.Response
			var body string
			wait.For(t, "the answer kept", func() bool {
				resp, body = proxytest.Do(t, addr, post("k5", "book"))
				return resp.StatusCode == 201
			})
			if body != "order 1 for book" || resp.Header.Get("Idempotent-Replayed") != "true" || o.n.Load() != 1 {
				t.Errorf("retry: %d %q, %d orders", resp.StatusCode, body, o.n.Load())
			}
		})
	}
}

// TestPhaseNotResentOnStaleConnection: sluice's own retries treat a keyed
// request as one that must reach the upstream at most once: a keyed POST
// on a pooled connection the upstream closed is not resent (without the
// layer, the key would allow it).
func TestPhaseNotResentOnStaleConnection(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.DropReused(true))
	opts := &proxy.PeerOptions{ResponseHeaderTimeout: 2 * time.Second, Retry: &retry.Policy{},
		Pool: &pool.Limits{MaxIdle: 4, IdleTimeout: time.Minute, Once: pool.Once{Mode: pool.Reuse, MaxIdle: time.Minute}}}
	addr := serve(t, newLayer(t, idempotency.Options{}), up.Addr(), opts)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	var mu sync.Mutex
	roundTrip := func(req string) int {
		mu.Lock()
		defer mu.Unlock()
		io.WriteString(c, req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if st := roundTrip("GET /warm HTTP/1.1\r\nHost: shop\r\n\r\n"); st != 200 {
		t.Fatalf("warm-up: %d", st)
	}
	if st := roundTrip(post("k6", "book")); st != 502 {
		t.Errorf("a keyed POST on the dead pooled connection: %d, want 502 (not resent)", st)
	}
	if n := len(up.Requests()); n != 2 {
		t.Errorf("the upstream got %d requests, want 2", n)
	}
}
