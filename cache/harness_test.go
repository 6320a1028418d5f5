package cache

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/route"
)

// origin is an upstream for the tests: a net/http server whose handler a
// test sets, counting the requests it gets.
type origin struct {
	srv      *httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	handler  http.HandlerFunc
	seen     []*http.Request
}

func newOrigin(t testing.TB, h http.HandlerFunc) *origin {
	o := &origin{handler: h}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.requests.Add(1)
		o.mu.Lock()
		o.seen = append(o.seen, r)
		h := o.handler
		o.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *origin) addr() string { return strings.TrimPrefix(o.srv.URL, "http://") }

func (o *origin) set(h http.HandlerFunc) {
	o.mu.Lock()
	o.handler = h
	o.mu.Unlock()
}

func (o *origin) last() *http.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen[len(o.seen)-1]
}

// picker sends every try to one peer.
type picker struct{ p *proxy.Peer }

func (p picker) Pick(*proxy.Session) (*proxy.Peer, error) { return p.p, nil }

// testProxy serves a route with the cache c in front of o, and returns its
// address.
func testProxy(t testing.TB, o *origin, c *Cache, phases ...any) string {
	t.Helper()
	opts := &proxy.PeerOptions{ConnectTimeout: time.Second, ResponseHeaderTimeout: 5 * time.Second,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	addr := "127.0.0.1:1" // a port nothing listens on
	if o != nil {
		addr = o.addr()
	}
	tbl := route.New(route.Route{Upstream: picker{&proxy.Peer{Addr: addr, Options: opts}}, Phases: append([]any{c}, phases...)})
	srv := &proxy.Server{Handler: tbl, ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeWith(ln, proxy.ListenerOptions{Protocols: []string{"http/1.1", "h2c"}})
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String()
}

// h2Client is an HTTP/2 client (h2c, prior knowledge) that opens as many
// connections as its streams need.
func h2Client(t testing.TB) *http.Client {
	tr := &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// newTestCache is a cache on a memory store of 64 MiB.
func newTestCache(t testing.TB, opts Options) *Cache {
	t.Helper()
	if opts.Store == nil {
		m, err := NewMemory(64 << 20)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		opts.Store = m
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// conn is a keep-alive client connection to the proxy.
type conn struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dial(t testing.TB, addr string) *conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &conn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// do sends a request ("GET /a" and extra header lines) and reads the
// response.
func (c *conn) do(method, target string, extra ...string) (*http.Response, string) {
	c.t.Helper()
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: example.com\r\n%s\r\n", method, target, strings.Join(extra, ""))
	if _, err := io.WriteString(c.nc, req); err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, string(b)
}

func (c *conn) get(target string, extra ...string) (*http.Response, string) {
	c.t.Helper()
	return c.do("GET", target, extra...)
}

// waiting returns how many requests wait on flights of c.
func waiting(c *Cache, _ string) int {
	n := 0
	for i := range c.locks.shards {
		sh := &c.locks.shards[i]
		sh.mu.Lock()
		for _, f := range sh.m {
			n += int(f.waiters.Load())
		}
		sh.mu.Unlock()
	}
	return n
}
