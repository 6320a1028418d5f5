package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy/internal/park"
	"github.com/sluice-proxy/sluice/retry"
)

// rotate is the simplest Handler: its peers in turn, skipping any that
// already failed this request while another is left.
type rotate struct {
	mu    sync.Mutex
	peers []*Peer
	next  int
}

func (h *rotate) UpstreamPeer(s *Session) (*Peer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.peers) == 0 {
		return nil, &fault.Error{Kind: fault.NoUpstream, Source: fault.Internally}
	}
	for i := 0; i < len(h.peers); i++ {
		p := h.peers[(h.next+i)%len(h.peers)]
		if !s.Tried(p.Addr) {
			h.next = (h.next + i + 1) % len(h.peers)
			return p, nil
		}
	}
	p := h.peers[h.next%len(h.peers)]
	h.next++
	return p, nil
}

// peers returns peers for the addresses sharing one set of options.
func peers(opts *PeerOptions, addrs ...string) *rotate {
	h := &rotate{}
	for _, a := range addrs {
		h.peers = append(h.peers, &Peer{Addr: a, Options: opts})
	}
	return h
}

// testOptions are pooling on, and timeouts that only bound a test that is
// failing anyway: a loaded machine running the race detector must not
// trip them (a test of a timeout sets its own, short). So is the idle time
// past which a request that must be sent once dials anew.
func testOptions() *PeerOptions {
	return &PeerOptions{
		ConnectTimeout:        wait.Timeout,
		ResponseHeaderTimeout: wait.Timeout,
		ReadTimeout:           wait.Timeout,
		WriteTimeout:          wait.Timeout,
		// Requests that must be sent once take pooled connections, as
		// the seeds' proxies do, so that tests see what happens then.
		Pool: &pool.Limits{MaxIdle: 64, IdleTimeout: time.Minute,
			Once: pool.Once{Mode: pool.Reuse, MaxIdle: wait.Timeout}},
		Retry: &retry.Policy{},
	}
}

// logBuffer collects log output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type harness struct {
	srv    *Server
	addr   string
	errors *logBuffer
	access *logBuffer
}

// start runs a proxy for h on 127.0.0.1:0 until the test ends.
func start(t testing.TB, h Handler, tweak ...func(*Server)) *harness {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.srv.Serve(ln)
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

// client is a raw HTTP/1.1 client connection to the proxy.
type client struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func (hs *harness) dial(t testing.TB) *client {
	t.Helper()
	nc, err := net.Dial("tcp", hs.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// response reads one response with net/http's reader: an independent
// parser, used only by tests.
func (c *client) response(method string) (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatalf("reading response body: %v", err)
	}
	return resp, string(body)
}

// roundTrip sends a request and reads its response.
func (c *client) roundTrip(req string) (*http.Response, string) {
	c.t.Helper()
	c.send(req)
	method, _, _ := strings.Cut(req, " ")
	return c.response(method)
}

// closed reports whether the proxy closed the connection (EOF) within d,
// after reading and discarding anything still pending.
func (c *client) closed(d time.Duration) bool {
	c.nc.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c.br)
	return err == nil
}

// get sends "GET path" on a new connection and returns status and body.
func (hs *harness) get(t testing.TB, path string) (int, string) {
	t.Helper()
	c := hs.dial(t)
	resp, body := c.roundTrip("GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n")
	c.nc.Close()
	return resp.StatusCode, body
}

// do sends one request on a new connection.
func (hs *harness) do(t testing.TB, req string) (*http.Response, string) {
	t.Helper()
	c := hs.dial(t)
	defer c.nc.Close()
	return c.roundTrip(req)
}

// waitSettled waits until the proxy holds no client connection any more
// and a worker that served one waits idle: the base from which a test
// counts goroutines or memory. (A second worker may still be on its way
// from its connection's end to the idle list, a few instructions with no
// wait in them.)
func (hs *harness) waitSettled(t testing.TB) {
	t.Helper()
	wait.For(t, "the proxy to hold no client connection and a worker to wait idle", func() bool {
		hs.srv.mu.Lock()
		n := len(hs.srv.conns)
		hs.srv.mu.Unlock()
		return n == 0 && hs.srv.workers.Idle() > 0
	})
}

// waitParked waits until the parker holds n connections. Where there is
// no parker (park.Supported is false) it returns at once: connections
// wait with their goroutine there.
func (hs *harness) waitParked(t testing.TB, n int) {
	t.Helper()
	if !park.Supported {
		return
	}
	wait.For(t, fmt.Sprintf("%d connections parked", n), func() bool { return parkedConns(hs.srv) == n })
}

func newReader(nc net.Conn) *bufio.Reader { return bufio.NewReader(nc) }

// readUntil reads from c until what it read ends with s, and returns it
// all: for a test that acts once the client has got part of a response.
func (c *client) readUntil(s string) string {
	c.t.Helper()
	var b strings.Builder
	for !strings.HasSuffix(b.String(), s) {
		ch, err := c.br.ReadByte()
		if err != nil {
			c.t.Fatalf("reading up to %q: %v (so far %q)", s, err, b.String())
		}
		b.WriteByte(ch)
	}
	return b.String()
}

// readResponse reads one response and returns its status, for goroutines
// that cannot call t.Fatal.
func readResponse(br *bufio.Reader, method string) (int, error) {
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// readHTTP reads one response head with net/http's reader.
func readHTTP(c *client) (*http.Response, error) {
	return http.ReadResponse(c.br, &http.Request{Method: "GET"})
}
