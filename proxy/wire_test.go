package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/retry"
)

func TestSimpleGet(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hello"))
	hs := start(t, peers(testOptions(), up.Addr()))
	status, body := hs.get(t, "/x")
	if status != 200 || body != "hello" {
		t.Fatalf("got %d %q", status, body)
	}
	r := up.Requests()[0]
	for _, f := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Via"} {
		if r.Get(f) == "" {
			t.Errorf("upstream request lacks %s: %q", f, r.RawHead)
		}
	}
	wait.For(t, "the access log line", func() bool { return strings.Contains(hs.access.String(), "status=200") })
}

// answerTarget answers a request with its target, so that a test can
// tell which request an answer is for.
func answerTarget(c *upstreamtest.Conn, r *upstreamtest.Request) {
	c.Respond(200, "you asked for "+r.Target)
}

func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	up := upstreamtest.Start(t, answerTarget)
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	c.send("GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n")
	for _, want := range []string{"you asked for /1", "you asked for /2"} {
		resp, body := c.response("GET")
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("got %d %q, want %q", resp.StatusCode, body, want)
		}
	}
}

// Empty lines before a request are skipped (RFC 9112 §2.2), on a new
// connection's first read (conn.readFirst) as between requests, and the
// connection then waits for a request as an idle one does: a request sent
// after them is answered.
func TestEmptyLinesBeforeRequests(t *testing.T) {
	up := upstreamtest.Start(t, answerTarget)
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	c.send("\r\n\r\nGET /1 HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, body := c.response("GET"); resp.StatusCode != 200 || body != "you asked for /1" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	c = hs.dial(t)
	c.send("\r\n")
	c.send("GET /2 HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, body := c.response("GET"); resp.StatusCode != 200 || body != "you asked for /2" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestChunkedByteExactBothWays(t *testing.T) {
	reqBody := "5;foo=bar\r\nhello\r\n0\r\nX-Req-Trailer: 1\r\n\r\n"
	respBody := "3;up-ext=1\r\nabc\r\n0\r\nX-Up-Trailer: 2\r\n\r\n"
	up := upstreamtest.Start(t, upstreamtest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"+respBody))
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	c.send("POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + reqBody)
	// Read the response raw: head, then exactly the body bytes.
	head := readRawHead(t, c)
	if !strings.Contains(head, "Transfer-Encoding: chunked") {
		t.Fatalf("response head %q", head)
	}
	got := make([]byte, len(respBody))
	if _, err := io.ReadFull(c.br, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != respBody {
		t.Fatalf("response body %q, want %q", got, respBody)
	}
	if !up.WaitRequests(1, 2*time.Second) {
		t.Fatal("upstream saw no request")
	}
	if raw := string(up.Requests()[0].RawBody); raw != reqBody {
		t.Fatalf("upstream got body %q, want %q", raw, reqBody)
	}
}

// readRawHead reads a response head byte for byte up to the empty line.
func readRawHead(t *testing.T, c *client) string {
	t.Helper()
	var b strings.Builder
	for !strings.HasSuffix(b.String(), "\r\n\r\n") {
		ch, err := c.br.ReadByte()
		if err != nil {
			t.Fatalf("reading head: %v (so far %q)", err, b.String())
		}
		b.WriteByte(ch)
	}
	return b.String()
}

func TestHeaderCaseKeptBothWays(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Raw("HTTP/1.1 200 OK\r\ncontent-LENGTH: 2\r\nX-UpStream-Case: yes\r\n\r\nok"))
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	c.send("GET / HTTP/1.1\r\nhost: Example.COM\r\nX-MiXeD-Case: 1\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n\r\n")
	head := readRawHead(t, c)
	if !strings.Contains(head, "\r\ncontent-LENGTH: 2\r\nX-UpStream-Case: yes\r\n") {
		t.Fatalf("response head lost its case: %q", head)
	}
	up.WaitRequests(1, 2*time.Second)
	raw := string(up.Requests()[0].RawHead)
	if !strings.Contains(raw, "\r\nhost: Example.COM\r\nX-MiXeD-Case: 1\r\n") {
		t.Fatalf("request head lost its case or order: %q", raw)
	}
	if strings.Contains(raw, "X-Drop") || strings.Contains(raw, "Connection") {
		t.Fatalf("hop-by-hop fields forwarded: %q", raw)
	}
}

func TestBadRequestsNeverReachUpstream(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("must not be seen"))
	hs := start(t, peers(testOptions(), up.Addr()))
	tests := []struct {
		name, req string
		status    int
	}{
		{"CL and TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"TE and CL", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400},
		{"TE not chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nxx", 400},
		{"TE chunked then identity", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400},
		{"TE gzip, chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
		{"TE on HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"two lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400},
		{"length with sign", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", 400},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n", 400},
		{"bare CR", "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400},
		{"NUL", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", 400},
		{"no host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"header without colon", "GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400},
		{"bad version", "GET / HTTP/1.x\r\nHost: a\r\n\r\n", 400},
		{"too many headers", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: 1\r\n", 101) + "\r\n", 431},
		{"head too large", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", 431},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := hs.dial(t)
			c.send(tt.req)
			resp, _ := c.response("GET")
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status != 405 && resp.Header.Get("Proxy-Status") == "" {
				t.Errorf("no Proxy-Status on a %d", tt.status)
			}
			if !c.closed(2 * time.Second) {
				t.Fatal("connection left open after a malformed request")
			}
		})
	}
	if n := up.Accepts(); n != 0 {
		t.Fatalf("upstream saw %d connections", n)
	}
}

func TestBadChunkAfterHeadWentUpstream(t *testing.T) {
	// The head and a good chunk go upstream; then a malformed chunk size:
	// the client gets 400 and the upstream never sees a complete request.
	headUp := make(chan struct{}, 1)
	up := upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
		headUp <- struct{}{}
		if _, err := io.Copy(io.Discard, body); err == nil {
			c.Respond(200, "done")
		}
	})
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	c.send("POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	<-headUp // the head went upstream first
	c.send("zz\r\nbad\r\n0\r\n\r\n")
	resp, _ := c.response("POST")
	if resp.StatusCode != 400 {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if !c.closed(2 * time.Second) {
		t.Fatal("connection left open")
	}
	for _, r := range up.Requests() {
		if r.Complete {
			t.Fatalf("upstream completed a request with a malformed body: %q", r.RawBody)
		}
	}
}

func TestHeadResponseHasNoBody(t *testing.T) {
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Method == "HEAD" {
			c.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
			return
		}
		c.Respond(200, "hello")
	})
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	resp, body := c.roundTrip("HEAD / HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.StatusCode != 200 || body != "" || resp.ContentLength != 5 {
		t.Fatalf("HEAD: %d %q len %d", resp.StatusCode, body, resp.ContentLength)
	}
	resp, body = c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("GET after HEAD: %d %q", resp.StatusCode, body)
	}
}

func TestDuplexBodyAndResponse(t *testing.T) {
	// The upstream answers after half the body; the client sends the rest
	// only once it has seen that answer.
	up := upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
		half := make([]byte, 5)
		if _, err := io.ReadFull(body, half); err != nil {
			return
		}
		c.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nearly\r\n")
		rest, _ := io.ReadAll(body)
		c.WriteString(fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(rest)+5, "later"+string(rest)))
	})
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	c.send("POST /d HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhello")
	head := readRawHead(t, c)
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatalf("head %q", head)
	}
	early := make([]byte, len("5\r\nearly\r\n"))
	if _, err := io.ReadFull(c.br, early); err != nil || string(early) != "5\r\nearly\r\n" {
		t.Fatalf("early part %q %v", early, err)
	}
	c.send("world")
	rest := "a\r\nlaterworld\r\n0\r\n\r\n"
	got := make([]byte, len(rest))
	if _, err := io.ReadFull(c.br, got); err != nil || string(got) != rest {
		t.Fatalf("rest %q %v", got, err)
	}
	// The connection is still good for another request.
	c.send("POST /d HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhello")
	readRawHead(t, c)
}

func TestStaleIdleConnectionsNeverUsed(t *testing.T) {
	// The upstream closes each connection after its answer, as an idle
	// timeout would, when the test says so; the next request goes once the
	// proxy's end has the FIN, and must never land on the closed
	// connection.
	closeNow, closed := make(chan struct{}), make(chan struct{})
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Respond(200, "ok")
		select {
		case <-closeNow:
		case <-c.Done():
			return
		}
		c.Close()
		c.Sent() // the FIN acknowledged
		closed <- struct{}{}
	})
	hs := start(t, peers(testOptions(), up.Addr()))
	for i := 0; i < 4; i++ {
		if i > 0 {
			closeNow <- struct{}{}
			<-closed
		}
		if status, _ := hs.get(t, "/"); status != 200 {
			t.Fatalf("request %d: status %d", i, status)
		}
	}
	if n := up.Accepts(); n != 4 {
		t.Errorf("upstream accepted %d connections, want 4 (one per request)", n)
	}
	if s := hs.srv.Pool.Stats(); s.Watched+s.Stale+s.Expired < 3 {
		t.Errorf("pool did not notice the closed connections: %+v", s)
	}
	if strings.Contains(hs.errors.String(), "retrying") {
		t.Errorf("a request was retried, so a stale connection was used:\n%s", hs.errors)
	}
}

// startWithShortUpstreamTimeouts serves a proxy whose response-header and
// read timeouts (50ms) pass while its pooled connection idles between a
// test's requests.
func startWithShortUpstreamTimeouts(t *testing.T) (*upstreamtest.Server, *harness) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	opts := testOptions()
	opts.ResponseHeaderTimeout = 50 * time.Millisecond
	opts.ReadTimeout = 50 * time.Millisecond
	return up, start(t, peers(opts, up.Addr()))
}

// A pooled connection that idles past the response-header and read
// timeouts of its last request is still alive and is used again: those
// deadlines belonged to that request, not to the connection.
func TestIdleConnectionOutlivesLastRequestsTimeouts(t *testing.T) {
	up, hs := startWithShortUpstreamTimeouts(t)
	for i := 0; i < 3; i++ {
		if i > 0 {
			// The stimulus is the idle time itself: past the 50 ms
			// deadlines set on the connection for the last request.
			// Nothing happens when they pass that a test could wait
			// for, and a real socket cannot run on synctest's clock.
			time.Sleep(150 * time.Millisecond)
		}
		if status, _ := hs.get(t, "/"); status != 200 {
			t.Fatalf("request %d: status %d", i, status)
		}
	}
	if n, s := up.Accepts(), hs.srv.Pool.Stats(); n != 1 || s.Stale != 0 {
		t.Errorf("upstream accepted %d connections, want 1; pool %+v", n, s)
	}
}

// The same for a request whose body streams through the pump: the
// response is read while the body still flows, and a read deadline left
// from the connection's last request must not cut that read short.
func TestStreamedBodyOnConnectionIdlePastLastTimeouts(t *testing.T) {
	up, hs := startWithShortUpstreamTimeouts(t)
	if status, _ := hs.get(t, "/"); status != 200 {
		t.Fatalf("first request: status %d", status)
	}
	time.Sleep(150 * time.Millisecond) // idle past the last request's deadlines: the stimulus, as above
	c := hs.dial(t)
	body := strings.Repeat("b", 1000)
	c.send("PUT /p HTTP/1.1\r\nHost: a\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body[:10])
	hs.waitRead(t, c.nc) // the rest of the body comes later: the pump carries it
	c.send(body[10:])
	if resp, got := c.response("PUT"); resp.StatusCode != 200 || got != "ok" {
		t.Fatalf("PUT on a pooled connection: %d %q\n%s", resp.StatusCode, got, hs.errors)
	}
	if n, s := up.Accepts(), hs.srv.Pool.Stats(); n != 1 {
		t.Errorf("upstream accepted %d connections, want 1; pool %+v\n%s", n, s, hs.access)
	}
}

func TestHeaderTimeoutOnEveryRequest(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) {
		s.HeaderTimeout = 200 * time.Millisecond
		s.IdleTimeout = 5 * time.Second
	})
	// First request of a connection: half a head, then silence.
	c := hs.dial(t)
	c.send("GET / HTTP/1.1\r\nHo")
	resp, _ := c.response("GET")
	if resp.StatusCode != 408 {
		t.Fatalf("status %d, want 408", resp.StatusCode)
	}
	if !c.closed(3 * time.Second) {
		t.Fatal("not closed after the header timeout")
	}
	// Second request of a connection: same.
	c = hs.dial(t)
	if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	c.send("GET / HTTP/1.1\r\nHo")
	resp, _ = c.response("GET")
	if resp.StatusCode != 408 || !c.closed(3*time.Second) {
		t.Fatalf("second request: status %d", resp.StatusCode)
	}
}

func TestIdleTimeoutBetweenRequests(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) {
		s.IdleTimeout = 150 * time.Millisecond
	})
	c := hs.dial(t)
	if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	// No request begins: the connection closes without any answer.
	if !c.closed(3 * time.Second) {
		t.Fatal("idle connection not closed")
	}
}

// A client that stops reading its response is dropped after the send
// timeout (and at most its slack), on the first response and on a later one.
func TestSendTimeout(t *testing.T) {
	big := strings.Repeat("x", 16<<20) // more than the socket buffers hold
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Target == "/big" {
			c.Respond(200, big)
			return
		}
		c.Respond(200, "ok")
	})
	const timeout = 300 * time.Millisecond
	opts := testOptions()
	opts.ResponseHeaderTimeout = 10 * time.Second
	hs := start(t, peers(opts, up.Addr()), func(s *Server) { s.SendTimeout = timeout })
	for _, first := range []bool{true, false} {
		c := hs.dial(t)
		if !first {
			if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
				t.Fatal(resp.Status)
			}
		}
		c.send("GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
		// The client reads nothing; the proxy must give up on its own.
		start := time.Now()
		wait.For(t, "the stalled response to end", func() bool {
			return strings.Count(hs.access.String(), "/big") == map[bool]int{true: 1, false: 2}[first]
		})
		if d := time.Since(start); d < timeout {
			t.Errorf("gave up after %v, before the send timeout", d)
		}
		c.nc.Close()
	}
}

func TestExpectContinue(t *testing.T) {
	up := upstreamtest.StartStreaming(t, upstreamtest.Continue(upstreamtest.Echo()))
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	c.send("POST /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	head := readRawHead(t, c)
	if !strings.HasPrefix(head, "HTTP/1.1 100") {
		t.Fatalf("wanted 100 Continue before sending the body, got %q", head)
	}
	c.send("hello")
	resp, body := c.response("POST")
	if resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestUpgradeTunnel(t *testing.T) {
	// A raw upstream: answer the upgrade, then echo bytes until EOF.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
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
	hs := start(t, peers(testOptions(), ln.Addr().String()))
	c := hs.dial(t)
	c.send("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	head := readRawHead(t, c)
	if !strings.HasPrefix(head, "HTTP/1.1 101") || !strings.Contains(head, "Upgrade: echo") {
		t.Fatalf("head %q", head)
	}
	for _, msg := range []string{"ping", "pong and more"} {
		c.send(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c.br, got); err != nil || string(got) != msg {
			t.Fatalf("echo %q: got %q %v", msg, got, err)
		}
	}
	c.nc.(*net.TCPConn).CloseWrite()
	if !c.closed(3 * time.Second) {
		t.Fatal("tunnel not closed after the client finished")
	}
}

func TestHTTP10ClientGetsDecodedChunked(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n"))
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	c.send("GET / HTTP/1.0\r\n\r\n")
	head := readRawHead(t, c)
	if strings.Contains(head, "Transfer-Encoding") || !strings.Contains(head, "Connection: close") {
		t.Fatalf("head %q", head)
	}
	body, err := io.ReadAll(c.br)
	if err != nil || string(body) != "hello world" {
		t.Fatalf("body %q %v", body, err)
	}
	// The HTTP/1.0 request had no Host; the HTTP/1.1 request upstream has.
	if h := up.Requests()[0].Get("Host"); h != up.Addr() {
		t.Fatalf("upstream Host %q, want %q", h, up.Addr())
	}
}

func TestManyKeepAliveClients(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()))
	const clients, requests = 64, 100
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", hs.addr)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(30 * time.Second))
			c := &client{t: t, nc: nc}
			c.br = newReader(nc)
			for j := 0; j < requests; j++ {
				if _, err := io.WriteString(nc, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
					errs <- err
					return
				}
				resp, err := readResponse(c.br, "GET")
				if err != nil || resp != 200 {
					errs <- fmt.Errorf("status %d err %v", resp, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := len(up.Requests()); n != clients*requests {
		t.Fatalf("upstream saw %d requests", n)
	}
	if n := up.Accepts(); n > clients {
		t.Fatalf("upstream accepted %d connections for %d concurrent clients", n, clients)
	}
}

func TestShutdownDrains(t *testing.T) {
	release := make(chan struct{})
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Target == "/slow" {
			select {
			case <-release:
			case <-c.Done():
				return
			}
		}
		c.Respond(200, "done "+r.Target)
	})
	hs := start(t, peers(testOptions(), up.Addr()))
	idle := hs.dial(t)
	if resp, _ := idle.roundTrip("GET /first HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	busy := hs.dial(t)
	busy.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	up.WaitRequests(2, 2*time.Second)

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- hs.srv.Shutdown(ctx)
	}()
	// The idle connection is closed; no new connection is accepted.
	if !idle.closed(2 * time.Second) {
		t.Fatal("idle connection not closed by Shutdown")
	}
	wait.For(t, "the listener to close", func() bool {
		nc, err := net.Dial("tcp", hs.addr)
		if err == nil {
			nc.Close()
		}
		return err != nil
	})
	// The request in flight finishes, with Connection: close.
	close(release)
	resp, body := busy.response("GET")
	if resp.StatusCode != 200 || body != "done /slow" || !resp.Close {
		t.Fatalf("in-flight request: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestEarlyAnswerKeepsClientConnection(t *testing.T) {
	// The upstream answers as soon as it has the head, before the body
	// (nginx's "return 200" does this). The client's connection must stay
	// usable: sluice reads and throws away the rest of the body rather than
	// closing a connection whose response said keep-alive.
	up := upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
		c.Respond(200, "early")
		io.Copy(io.Discard, body)
	})
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	body := strings.Repeat("b", 20000)
	for i := 0; i < 20; i++ {
		resp, got := c.roundTrip(fmt.Sprintf("POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
		if resp.StatusCode != 200 || got != "early" || resp.Close {
			t.Fatalf("POST %d: %d %q close=%v", i, resp.StatusCode, got, resp.Close)
		}
	}
	if resp, _ := c.roundTrip("GET /after HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("GET after the POSTs: %d", resp.StatusCode)
	}
}

// TestResponseWithLengthAndChunked: a response framed by both
// Content-Length and Transfer-Encoding goes on framed by the chunked coding
// alone (RFC 9112 §6.3), to HTTP/1.1 and HTTP/1.0 clients, and its
// connection is not reused.
func TestResponseWithLengthAndChunked(t *testing.T) {
	const raw = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nX-After: 1\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	for _, version := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(version, func(t *testing.T) {
			up := upstreamtest.Start(t, upstreamtest.Raw(raw))
			hs := start(t, peers(testOptions(), up.Addr()))
			c := hs.dial(t)
			c.send("GET / " + version + "\r\nHost: a\r\nConnection: close\r\n\r\n")
			head := readRawHead(t, c)
			if strings.Contains(strings.ToLower(head), "content-length") || !strings.Contains(head, "X-After: 1") {
				t.Fatalf("head %q", head)
			}
			want := "5\r\nhello\r\n0\r\n\r\n"
			if version == "HTTP/1.0" {
				want = "hello" // decoded, ended by the close
			}
			if body, err := io.ReadAll(c.br); err != nil || string(body) != want {
				t.Fatalf("body %q %v, want %q", body, err, want)
			}
			hs.get(t, "/again")
			if up.Accepts() != 2 {
				t.Fatalf("the connection was reused after a response with both framings (accepts %d)", up.Accepts())
			}
		})
	}
}

// TestDrainTimeoutBoundsShutdown: with upstreams slower than the drain,
// Shutdown returns when its context ends, not when they answer. A request
// still waiting for its upstream gets a 503 that says why, with
// Connection: close; a response under way is aborted with a reset; a POST
// waiting for its answer is not sent again.
func TestDrainTimeoutBoundsShutdown(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	b := upstreamtest.Start(t, upstreamtest.OK("B"))
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Target == "/streaming" {
			c.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
		}
		select { // answers nothing more before the test ends
		case <-release:
		case <-c.Done():
		}
	})
	// POSTs may be resent, so that only the drain stops a retry.
	opts := withPolicy(&retry.Policy{NonIdempotent: retry.Always})
	opts.ResponseHeaderTimeout = time.Minute
	opts.ReadTimeout = time.Minute
	hs := start(t, inOrder(opts, up.Addr(), b.Addr()))
	waiting := []*client{hs.dial(t), hs.dial(t)}
	waiting[0].send("GET /waiting HTTP/1.1\r\nHost: a\r\n\r\n")
	waiting[1].send("POST /waiting HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
	streaming := hs.dial(t)
	streaming.send("GET /streaming HTTP/1.1\r\nHost: a\r\n\r\n")
	if head := readRawHead(t, streaming); !strings.Contains(head, "chunked") {
		t.Fatalf("streamed head %q", head)
	}
	if !up.WaitRequests(3, 5*time.Second) {
		t.Fatal("the upstream did not get the three requests")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := hs.srv.Shutdown(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Shutdown = %v, want the context's deadline", err)
	}
	// Shutdown has returned while the upstream still holds every request.
	for i, c := range waiting {
		resp, body := c.response("GET")
		if resp.StatusCode != 503 || !resp.Close || !strings.Contains(resp.Header.Get("Proxy-Status"), "proxy_internal_error") {
			t.Fatalf("waiting request %d: %d %q close=%v Proxy-Status %q", i, resp.StatusCode, body, resp.Close, resp.Header.Get("Proxy-Status"))
		}
	}
	streaming.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(streaming.br); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("response under way: read %q, then %v; want a reset", got, err)
	}
	if b.Accepts() != 0 {
		t.Fatal("a request cut short by the drain was retried on another server")
	}
	if !strings.Contains(hs.errors.String(), "drain timeout passed") {
		t.Fatalf("the log does not say why:\n%s", hs.errors)
	}
}

// TestBareLFHeadForwardedWithCRLF: a request head whose lines end in a bare
// LF is accepted (RFC 9112 §2.2 allows it) and goes upstream with CRLF line
// ends only, so that no upstream can read it differently.
func TestBareLFHeadForwardedWithCRLF(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	resp, body := c.roundTrip("POST /lf HTTP/1.1\nHost: a\nX-A: 1\r\nContent-Length: 2\n\nhi")
	if resp.StatusCode != 200 || body != "hi" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	up.WaitRequests(1, 2*time.Second)
	raw := string(up.Requests()[0].RawHead)
	if strings.Count(raw, "\n") != strings.Count(raw, "\r\n") || !strings.HasPrefix(raw, "POST /lf HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n") {
		t.Fatalf("upstream got head %q, want CRLF line ends only", raw)
	}
}

// A client busy on a kept-alive connection a moment ago, whose next
// request comes just after the drain began, gets it answered (with
// Connection: close) instead of a connection closed under it.
func TestShutdownServesNextRequest(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	if resp, _ := c.roundTrip("GET /first HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("first: %d close=%v", resp.StatusCode, resp.Close)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- hs.srv.Shutdown(ctx)
	}()
	// The connection, waiting for its next request, has been woken up by
	// the drain (wakeIfIdle) and waits its grace for one.
	wait.For(t, "the drain to wake the connection", func() bool {
		if !hs.srv.Draining() {
			return false
		}
		hs.srv.mu.Lock()
		defer hs.srv.mu.Unlock()
		for c := range hs.srv.conns {
			c.mu.Lock()
			idle := c.idle
			c.mu.Unlock()
			if idle {
				return false
			}
		}
		return true
	})
	resp, body := c.roundTrip("GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.StatusCode != 200 || body != "ok" || !resp.Close {
		t.Fatalf("next request during the drain: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}
