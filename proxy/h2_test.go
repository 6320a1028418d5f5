package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// startH2 runs a proxy for h on a plain listener that takes h2c, and
// returns it with an HTTP/2 client (prior knowledge) for it; tweak
// changes the Server before it starts.
func startH2(t *testing.T, h Handler, opts ListenerOptions, tweak ...func(*Server)) (*harness, *http.Client) {
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
		hs.srv.ServeWith(ln, opts)
	}()
	tr := &http2.Transport{AllowHTTP: true}
	if opts.TLS == nil {
		tr.DialTLSContext = func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.srv.Shutdown(ctx)
		<-done
		if t.Failed() {
			t.Logf("error log:\n%s\naccess log:\n%s", hs.errors, hs.access)
		}
	})
	return hs, &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func h2c() ListenerOptions { return ListenerOptions{Protocols: []string{"http/1.1", "h2c"}} }

func field(fs []upstreamtest.Field, name string) (string, bool) {
	for _, f := range fs {
		if strings.EqualFold(f.Name, name) {
			return f.Value, true
		}
	}
	return "", false
}

func TestH2cRequests(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	hs, client := startH2(t, peers(testOptions(), up.Addr()), h2c())
	long := strings.Repeat("0123456789abcdef", 1<<14) // 256 KiB, past a window
	tests := []struct {
		name    string
		method  string
		body    func() io.Reader
		length  int64
		want    string
		chunked bool // how the body went upstream
	}{
		{"GET", "GET", nil, 0, "", false},
		{"POST with a length", "POST", func() io.Reader { return strings.NewReader("hello") }, 5, "hello", false},
		{"POST without a length", "POST", func() io.Reader { return io.MultiReader(strings.NewReader("hel"), strings.NewReader("lo")) }, -1, "hello", true},
		{"a large POST", "POST", func() io.Reader { return strings.NewReader(long) }, int64(len(long)), long, false},
		{"a large POST without a length", "POST", func() io.Reader { return io.MultiReader(strings.NewReader(long)) }, -1, long, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != nil {
				body = tt.body()
			}
			req, _ := http.NewRequest(tt.method, "http://"+hs.addr+"/echo?x=1", body)
			req.ContentLength = tt.length
			req.Header.Set("Cookie", "a=1")
			req.Header.Add("Cookie", "b=2")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || string(got) != tt.want {
				t.Fatalf("%d, %d bytes, %v; want 200 with %d bytes", resp.StatusCode, len(got), err, len(tt.want))
			}
			if resp.ProtoMajor != 2 {
				t.Errorf("answered over %s", resp.Proto)
			}
			reqs := up.Requests()
			r := reqs[len(reqs)-1]
			if r.Method != tt.method || r.Target != "/echo?x=1" || r.Proto != "HTTP/1.1" {
				t.Errorf("upstream got %s %s %s", r.Method, r.Target, r.Proto)
			}
			if host, _ := field(r.Header, "Host"); host != hs.addr {
				t.Errorf("Host %q, want %q", host, hs.addr)
			}
			if c, _ := field(r.Header, "Cookie"); c != "a=1; b=2" {
				t.Errorf("Cookie %q, want the two joined", c)
			}
			if p, _ := field(r.Header, "X-Forwarded-Proto"); p != "http" {
				t.Errorf("X-Forwarded-Proto %q", p)
			}
			// A body without a length goes chunked, or with the length it
			// had when it arrived whole before its stream was served.
			te, _ := field(r.Header, "Transfer-Encoding")
			cl, hasCL := field(r.Header, "Content-Length")
			switch {
			case !tt.chunked && te == "chunked":
				t.Errorf("Transfer-Encoding %q upstream for a body with a length", te)
			case tt.chunked && te != "chunked" && (!hasCL || cl != strconv.Itoa(len(tt.want))):
				t.Errorf("Transfer-Encoding %q, Content-Length %q upstream for a body without a length", te, cl)
			}
			if len(reqs) != i+1 {
				t.Errorf("%d requests upstream, want %d", len(reqs), i+1)
			}
		})
	}
	if !strings.Contains(hs.access.String(), "protocol=HTTP/2") {
		t.Errorf("access log without the protocol:\n%s", hs.access)
	}
}

// TestH2ResponseFramings relays every framing an HTTP/1.1 upstream uses to
// an HTTP/2 client: each arrives whole, trailers as trailers, and no
// connection-specific field passes.
func TestH2ResponseFramings(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		method   string
		want     string
		trailers map[string]string
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nKeep-Alive: timeout=5\r\n\r\nhello", "GET", "hello", nil},
		{"chunked with trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Grpc-Status\r\n\r\n3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nGrpc-Status: 0\r\n\r\n", "GET", "hello", map[string]string{"Grpc-Status": "0"}},
		{"until close", "HTTP/1.0 200 OK\r\n\r\nhello", "GET", "hello", nil},
		{"no body", "HTTP/1.1 204 No Content\r\n\r\n", "GET", "", nil},
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
				c.WriteString(tt.raw)
				c.Close()
			})
			hs, client := startH2(t, peers(testOptions(), up.Addr()), h2c())
			req, _ := http.NewRequest(tt.method, "http://"+hs.addr+"/", nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(got) != tt.want {
				t.Fatalf("body %q, %v; want %q", got, err, tt.want)
			}
			for _, h := range []string{"Connection", "Keep-Alive", "Transfer-Encoding"} {
				if v := resp.Header.Get(h); v != "" {
					t.Errorf("%s: %q passed to the HTTP/2 client", h, v)
				}
			}
			for k, v := range tt.trailers {
				if got := resp.Trailer.Get(k); got != v {
					t.Errorf("trailer %s %q, want %q (trailers %v)", k, got, v, resp.Trailer)
				}
			}
		})
	}
}

// TestH2CutResponseIsReset: a response the upstream cuts mid-body reaches
// the HTTP/2 client as a reset stream, never as a body that looks whole,
// and the connection serves the next stream.
func TestH2CutResponseIsReset(t *testing.T) {
	for _, raw := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nhalf\r\n",
	} {
		up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
			if r.Target == "/ok" {
				c.Respond(200, "ok")
				return
			}
			c.WriteString(raw)
			c.Close()
		})
		hs, client := startH2(t, peers(testOptions(), up.Addr()), h2c())
		resp, err := client.Get("http://" + hs.addr + "/cut")
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		var se http2.StreamError
		if !errors.As(err, &se) || se.Code != http2.ErrCodeInternal {
			t.Errorf("%q: reading the body: %v, want a stream reset with INTERNAL_ERROR", raw, err)
		}
		if resp, err := client.Get("http://" + hs.addr + "/ok"); err != nil || resp.StatusCode != 200 {
			t.Errorf("the next stream: %v", err)
		} else {
			resp.Body.Close()
		}
	}
}

// TestH2RetriesAndErrors: the main line is the same for HTTP/2 requests:
// a refused server is retried on the next, and a failure that is the
// answer comes with its status and Proxy-Status.
func TestH2RetriesAndErrors(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs, client := startH2(t, peers(testOptions(), upstreamtest.Dead(t), up.Addr()), h2c())
	for i := 0; i < 4; i++ {
		resp, err := client.Get("http://" + hs.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}

	bad := upstreamtest.Start(t, upstreamtest.GarbageStatus())
	hs2, client2 := startH2(t, peers(testOptions(), bad.Addr()), h2c())
	resp, err := client2.Get("http://" + hs2.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(resp.Header.Get("Proxy-Status"), "http_protocol_error") {
		t.Errorf("%d, Proxy-Status %q; want 502 with http_protocol_error", resp.StatusCode, resp.Header.Get("Proxy-Status"))
	}
}

// TestH2ConcurrentStreams serves many streams of one connection at once,
// each to its own upstream exchange.
func TestH2ConcurrentStreams(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	hs, client := startH2(t, peers(testOptions(), up.Addr()), h2c())
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := strings.Repeat(string(rune('a'+i%26)), 1000+i)
			resp, err := client.Post("http://"+hs.addr+"/", "text/plain", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(got) != body {
				errs <- errors.New("a body came back changed")
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestH2OverTLS: ALPN settles on h2 by default on a TLS listener, and the
// request goes upstream with X-Forwarded-Proto: https.
func TestH2OverTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	leaf := ca.Server(t, "localhost")
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs, _ := startH2(t, peers(testOptions(), up.Addr()), ListenerOptions{TLS: &tls.Config{Certificates: []tls.Certificate{*leaf.TLS}}})
	tr := &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + hs.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok" || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2" {
		t.Fatalf("%d %q over %v", resp.StatusCode, b, resp.TLS)
	}
	if p, _ := field(up.Requests()[0].Header, "X-Forwarded-Proto"); p != "https" {
		t.Errorf("X-Forwarded-Proto %q", p)
	}
}

// TestH2PrefaceOnHTTP11Listener: a client speaking HTTP/2 to a listener
// that does not take h2c is told so in HTTP/2 (GOAWAY HTTP_1_1_REQUIRED),
// not answered in a protocol it cannot read.
func TestH2PrefaceOnHTTP11Listener(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()))
	nc, err := net.Dial("tcp", hs.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(nc, h2Preface)
	fr := http2.NewFramer(nc, nc)
	fr.WriteSettings()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY: %v", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeHTTP11Required || !bytes.Contains(ga.DebugData(), []byte("HTTP/1.1")) {
				t.Errorf("GOAWAY %v %q", ga.ErrCode, ga.DebugData())
			}
			return
		}
	}
}

// TestUpgradeH2cServedAsHTTP11: "Upgrade: h2c" is not taken and not
// forwarded; the request is answered in HTTP/1.1.
func TestUpgradeH2cServedAsHTTP11(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()))
	resp, body := hs.do(t, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	r := up.Requests()[0]
	for _, h := range []string{"Upgrade", "HTTP2-Settings", "Connection"} {
		if v, ok := field(r.Header, h); ok {
			t.Errorf("%s: %q forwarded", h, v)
		}
	}
}

// TestH2ShutdownFinishesStreams: Shutdown sends GOAWAY, and a stream in
// flight still gets its whole answer, which the upstream sends once the
// client has the GOAWAY.
func TestH2ShutdownFinishesStreams(t *testing.T) {
	release := make(chan struct{})
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		select {
		case <-release:
		case <-c.Done():
		}
		c.Respond(200, "late")
	})
	hs, _ := startH2(t, peers(testOptions(), up.Addr()), h2c())
	c := dialH2Raw(t, hs.addr)
	c.sendGet(1)
	up.WaitRequests(1, 5*time.Second)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- hs.srv.Shutdown(ctx)
	}()
	if ga := c.goAway(); ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("GOAWAY %v", ga.ErrCode)
	}
	ping := c.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	c.fr.WritePing(true, ping.Data)
	if ga := c.goAway(); ga.LastStreamID != 1 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("final GOAWAY: last stream %d, %v", ga.LastStreamID, ga.ErrCode)
	}
	close(release)
	if status, body, err := c.tryResponse(1); err != nil || status != "200" || string(body) != "late" {
		t.Errorf("the stream in flight got %s %q, %v", status, body, err)
	}
	c.nc.Close() // as a client does once its last stream ended after a GOAWAY
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestH2DrainTimeout: when the drain timeout passes, a stream still waiting
// for its upstream is answered 503 with Proxy-Status, as an HTTP/1.1
// request is, and Shutdown returns.
func TestH2DrainTimeout(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Silent())
	hs, client := startH2(t, peers(testOptions(), up.Addr()), h2c())
	type result struct {
		code   int
		status string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := client.Get("http://" + hs.addr + "/")
		if err != nil {
			got <- result{err: err}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- result{code: resp.StatusCode, status: resp.Header.Get("Proxy-Status")}
	}()
	up.WaitRequests(1, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := hs.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want the drain timeout", err)
	}
	r := <-got
	if r.err != nil || r.code != 503 || !strings.Contains(r.status, "proxy_internal_error") {
		t.Errorf("the stream got %d %q (%v), want 503 with proxy_internal_error", r.code, r.status, r.err)
	}
}

// TestH2ClientResetCutsUpstreamWait: an HTTP/2 client that gives up on a
// request (a browser navigating away) resets its stream; the wait for a
// slow upstream ends at once, as the client's fault, not at the upstream's
// 30 s response-header timeout, holding its connection till then.
func TestH2ClientResetCutsUpstreamWait(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Silent())
	opts := testOptions()
	opts.ResponseHeaderTimeout = 30 * time.Second
	hs, client := startH2(t, peers(opts, up.Addr()), h2c())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		up.WaitRequests(1, 5*time.Second)
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+hs.addr+"/slow", nil)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("got %d, want the request cancelled", resp.StatusCode)
	}
	wait.For(t, "the request's access log line", func() bool { return strings.Contains(hs.access.String(), "target=/slow") })
	if line := hs.access.String(); !strings.Contains(line, "error=client_closed") {
		t.Errorf("access log: %s, want error=client_closed", line)
	}
}

// TestH2RequestIDNeverIndexed: the request id, unique to each response,
// goes to the client as a literal never indexed, so that it does not
// churn the HPACK table the next responses' fields reuse; the others are
// indexed (the upstream's Server field, sent again, costs one byte).
func TestH2RequestIDNeverIndexed(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs, _ := startH2(t, peers(testOptions(), up.Addr()), h2c())
	c := dialH2Raw(t, hs.addr)
	for id := uint32(1); id <= 3; id += 2 {
		c.get(id)
		var rid *hpack.HeaderField
		for i, f := range c.fields {
			if f.Name == "x-request-id" {
				rid = &c.fields[i]
			} else if f.Sensitive {
				t.Errorf("stream %d: %s sent never indexed", id, f.Name)
			}
		}
		if rid == nil || !rid.Sensitive {
			t.Fatalf("stream %d: x-request-id %+v, want a literal never indexed", id, rid)
		}
	}
}

func TestLowerName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Content-Type", "content-type"},
		{"X-REQUEST-ID", "x-request-id"},
		{"strict-transport-security", "strict-transport-security"},
		{"X-Custom-Thing", "x-custom-thing"},
		{"Etag", "etag"},
		{"A", "a"},
		{strings.Repeat("Long-", 20), strings.Repeat("long-", 20)},
	} {
		if got := lowerName([]byte(tc.in)); got != tc.want {
			t.Errorf("lowerName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	name := []byte("Content-Length")
	if n := testing.AllocsPerRun(100, func() { lowerName(name) }); n != 0 {
		t.Errorf("lowerName of a common name allocates %v times", n)
	}
}

// TestIsConnectionField: the length-first look-up names exactly
// connectionFields, and not names of the same lengths.
func TestIsConnectionField(t *testing.T) {
	for _, name := range connectionFields {
		if !isConnectionField(name) || !isConnectionFieldFold([]byte(strings.ToUpper(name))) {
			t.Errorf("%q is not taken for a connection field", name)
		}
	}
	for _, name := range []string{"", "te", "upgradE", "content", "connectioN", "keep-alivex", "proxy-authorizat", "transfer-encodinG", "accept-encoding", "x-request-id"} {
		if isConnectionField(name) {
			t.Errorf("%q is taken for a connection field", name)
		}
	}
}

// TestH2ClientResetKeepsUpstreamConnection: a client that resets its stream
// while the upstream is about to answer does not cost the upstream
// connection. The answer that comes within cancelGrace is read and
// dropped, the connection goes back to the pool, and the next request
// takes it; before, the reset closed it.
func TestH2ClientResetKeepsUpstreamConnection(t *testing.T) {
	defer func(g time.Duration) { cancelGrace = g }(cancelGrace)
	cancelGrace = 10 * time.Second // the upstream answers well within it
	release := make(chan struct{})
	var held atomic.Bool
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Target == "/cancelled" && held.CompareAndSwap(false, true) {
			<-release
		}
		c.Respond(200, "ok")
	})
	hs, _ := startH2(t, peers(testOptions(), up.Addr()), h2c())
	c := dialH2Raw(t, hs.addr)
	c.buf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/cancelled"}, {":authority", "a"}} {
		c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.buf.Bytes(), EndStream: true, EndHeaders: true})
	if !up.WaitRequests(1, 5*time.Second) {
		t.Fatal("the request did not reach the upstream")
	}
	c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	// The PING's answer comes after the reset was acted on: frames are
	// read in order, and the reset cuts the wait as it is read.
	c.fr.WritePing(false, [8]byte{1})
	c.next(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
	close(release)
	wait.For(t, "the reset request's access log line", func() bool { return strings.Contains(hs.access.String(), "target=/cancelled") })
	if line := hs.access.String(); !strings.Contains(line, "client_closed") {
		t.Errorf("access log: %s, want the client's fault", line)
	}
	if status, body := c.get(3); status != "200" || string(body) != "ok" {
		t.Fatalf("next request: %s %q", status, body)
	}
	if n := up.Accepts(); n != 1 {
		t.Errorf("the upstream accepted %d connections, want 1: the reset cost the connection", n)
	}
}

// TestH2EndInItsOwnFrame: a request whose END_STREAM comes in a DATA frame
// of its own, after a HEADERS that did not end the stream, reaches an
// HTTP/1.1 upstream as the client meant it: a GET without a body (not
// chunked with nothing in it), a GET with a body with it.
func TestH2EndInItsOwnFrame(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	hs, _ := startH2(t, peers(testOptions(), up.Addr()), h2c())
	c := dialH2Raw(t, hs.addr)
	for i, tt := range []struct {
		name, body string
	}{
		{"no body", ""},
		{"a body", "x"},
	} {
		id := uint32(2*i + 1)
		t.Run(tt.name, func(t *testing.T) {
			// HEADERS and the DATA that ends the stream in one write:
			// the DATA is there as the stream is served, not yet read.
			var out bytes.Buffer
			fr := http2.NewFramer(&out, nil)
			c.buf.Reset()
			for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/late"}, {":authority", "a"}} {
				c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndHeaders: true})
			fr.WriteData(id, true, []byte(tt.body))
			if _, err := c.nc.Write(out.Bytes()); err != nil {
				t.Fatal(err)
			}
			if status, body, err := c.tryResponse(id); err != nil || status != "200" || string(body) != tt.body {
				t.Fatalf("%s %q %v, want 200 %q", status, body, err, tt.body)
			}
			reqs := up.Requests()
			r := reqs[len(reqs)-1]
			te, _ := field(r.Header, "Transfer-Encoding")
			if tt.body == "" && (te != "" || len(r.RawBody) != 0) {
				t.Errorf("a GET without a body went upstream with Transfer-Encoding %q and body %q", te, r.RawBody)
			}
			if string(r.Decoded) != tt.body {
				t.Errorf("upstream got body %q, want %q", r.Decoded, tt.body)
			}
		})
	}
}
