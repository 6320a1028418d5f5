package upstreamtest_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// response is a response as the test clients read it.
type response struct {
	status string
	header map[string]string // lower-case names
	body   string
}

// dial connects to s and closes the connection when the test ends.
func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return nc, bufio.NewReader(nc)
}

func send(t *testing.T, nc net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(nc, s); err != nil {
		t.Fatal(err)
	}
}

// readResponse reads one response framed by Content-Length (or without a
// body when there is none).
func readResponse(br *bufio.Reader) (response, error) {
	var resp response
	line, err := br.ReadString('\n')
	if err != nil {
		return resp, err
	}
	resp.status = strings.TrimRight(line, "\r\n")
	resp.header = map[string]string{}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return resp, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		name, value, _ := strings.Cut(line, ":")
		resp.header[strings.ToLower(name)] = strings.TrimSpace(value)
	}
	n, _ := strconv.Atoi(resp.header["content-length"])
	body := make([]byte, n)
	_, err = io.ReadFull(br, body)
	resp.body = string(body)
	return resp, err
}

func mustResponse(t *testing.T, br *bufio.Reader) response {
	t.Helper()
	resp, err := readResponse(br)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	return resp
}

func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.Echo())
	nc, br := dial(t, s.Addr())

	var reqs strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&reqs, "POST /p%d HTTP/1.1\r\nHost: x\r\nX-Request-Id: r%d\r\nContent-Length: 2\r\n\r\nb%d", i, i, i)
	}
	send(t, nc, reqs.String()) // one write: all three arrive together

	for i := 1; i <= 3; i++ {
		resp := mustResponse(t, br)
		if resp.status != "HTTP/1.1 200 OK" || resp.body != fmt.Sprintf("b%d", i) || resp.header["x-request-id"] != fmt.Sprintf("r%d", i) {
			t.Errorf("response %d = %+v", i, resp)
		}
	}
	got := s.Requests()
	if len(got) != 3 {
		t.Fatalf("recorded %d requests, want 3", len(got))
	}
	for i, r := range got {
		if r.Conn != 1 || r.Seq != i+1 || r.Target != fmt.Sprintf("/p%d", i+1) || !r.Complete {
			t.Errorf("request %d: conn %d seq %d target %q complete %v", i, r.Conn, r.Seq, r.Target, r.Complete)
		}
	}
	if s.Accepts() != 1 || s.Count("POST", "/p2") != 1 || s.Count("", "/p3") != 1 || s.Count("GET", "/p1") != 0 {
		t.Errorf("accepts %d, counts wrong: %+v", s.Accepts(), got)
	}
	if errs := s.Errors(); len(errs) != 0 {
		t.Errorf("errors: %v", errs)
	}
}

func TestAnswerFirstThenDrop(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.AnswerFirstThenDrop())
	for conn := 1; conn <= 2; conn++ {
		nc, br := dial(t, s.Addr())
		send(t, nc, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp := mustResponse(t, br); resp.body != fmt.Sprintf("conn %d", conn) {
			t.Errorf("first answer on conn %d: %+v", conn, resp)
		}
		send(t, nc, "GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
		if n, err := br.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("second request on conn %d: read %d, %v; want EOF", conn, n, err)
		}
	}
	if !s.WaitRequests(4, 5*time.Second) {
		t.Fatalf("recorded %d requests, want 4", len(s.Requests()))
	}
	if s.Accepts() != 2 || s.Count("GET", "/a") != 2 || s.Count("GET", "/b") != 2 {
		t.Errorf("accepts %d, requests %+v", s.Accepts(), s.Requests())
	}
}

func TestDropReusedReset(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.DropReused(true))
	nc, br := dial(t, s.Addr())
	send(t, nc, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	mustResponse(t, br)
	send(t, nc, "GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := br.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after the second request: %v, want ECONNRESET", err)
	}
}

func TestResetAfterRead(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.ResetAfterRead())
	nc, br := dial(t, s.Addr())
	send(t, nc, "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	if _, err := br.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read: %v, want ECONNRESET", err)
	}
	if got := s.Requests(); len(got) != 1 || string(got[0].Decoded) != "abc" {
		t.Errorf("requests: %+v", got)
	}
}

func TestChunkedRequestRecordedExactly(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.OK("done"))
	nc, br := dial(t, s.Addr())

	head := "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
	body := "5;name=value\r\nhello\r\n" +
		"6 ;a;b=\"q d\"\r\n world\r\n" +
		"A\r\n0123456789\r\n" +
		"0;last\r\nX-Sum: 42\r\nX-More:  yes \r\n\r\n"
	send(t, nc, head+body[:10])
	// The body arrives in pieces: the rest is sent once the server has read
	// the first and waits for more.
	wait.For(t, "the server to wait for the rest of the body", func() bool {
		return wait.Blocked("upstreamtest.(*bodyReader).", "IO wait")
	})
	send(t, nc, body[10:])
	if resp := mustResponse(t, br); resp.body != "done" {
		t.Fatalf("response %+v", resp)
	}

	got := s.Requests()
	if len(got) != 1 {
		t.Fatalf("recorded %d requests", len(got))
	}
	r := got[0]
	if string(r.RawHead) != head || string(r.RawBody) != body {
		t.Errorf("raw head %q\nraw body %q", r.RawHead, r.RawBody)
	}
	if string(r.Decoded) != "hello world0123456789" || !r.Complete {
		t.Errorf("decoded %q, complete %v", r.Decoded, r.Complete)
	}
	want := []upstreamtest.Field{{"X-Sum", "42"}, {"X-More", "yes"}}
	if fmt.Sprint(r.Trailer) != fmt.Sprint(want) {
		t.Errorf("trailer %v, want %v", r.Trailer, want)
	}
	if r.Get("transfer-encoding") != "chunked" || r.Get("Missing") != "" {
		t.Errorf("Get: %q %q", r.Get("transfer-encoding"), r.Get("Missing"))
	}
}

func TestCloseIdleAfter(t *testing.T) {
	const idle = 150 * time.Millisecond
	s := upstreamtest.Start(t, upstreamtest.CloseIdleAfter(idle, upstreamtest.OK("x")))
	nc, br := dial(t, s.Addr())

	// A request within the timeout is served on the same connection.
	var answered time.Time
	for i := range 2 {
		if i > 0 {
			time.Sleep(idle / 3) // the stimulus: a client idle for a while, within the timeout
		}
		send(t, nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp := mustResponse(t, br); resp.body != "x" || resp.header["keep-alive"] != "" {
			t.Fatalf("response %+v", resp)
		}
		answered = time.Now()
	}
	if _, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read: %v, want EOF", err)
	}
	// The server's clock started a little before the client saw the answer.
	if waited := time.Since(answered); waited < idle*2/3 || waited > idle+5*time.Second {
		t.Errorf("closed %v after the answer, want about %v", waited, idle)
	}
	if s.Accepts() != 1 || len(s.Requests()) != 2 {
		t.Errorf("accepts %d, requests %d", s.Accepts(), len(s.Requests()))
	}
}

func TestKeepAliveTimeoutAnnounced(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.KeepAliveTimeout(100*time.Millisecond, upstreamtest.OK("x")))
	nc, br := dial(t, s.Addr())
	send(t, nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp := mustResponse(t, br); resp.header["keep-alive"] != "timeout=1" {
		t.Errorf("response %+v, want Keep-Alive: timeout=1", resp)
	}
	if _, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read: %v, want EOF", err)
	}
}

func TestCannedResponses(t *testing.T) {
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nok\r\n0\r\nT: v\r\n\r\n"
	tests := []struct {
		name   string
		h      upstreamtest.Handler
		want   string
		closed bool // the server closes after answering
	}{
		{"OK", upstreamtest.OK("hi"), "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", false},
		{"Status", upstreamtest.Status(503, "busy"), "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy", false},
		{"Status204", upstreamtest.Status(204, "ignored"), "HTTP/1.1 204 No Content\r\n\r\n", false},
		{"GarbageStatus", upstreamtest.GarbageStatus(), "garbage\r\n\r\n", true},
		{"NoColonHeader", upstreamtest.NoColonHeader(), "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nBadHeaderWithoutColon\r\n\r\nok", false},
		{"Truncated", upstreamtest.Truncated(), "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nab", true},
		{"Raw", upstreamtest.Raw(chunked), chunked, false},
		{"nil", nil, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := upstreamtest.Start(t, tt.h)
			nc, br := dial(t, s.Addr())
			send(t, nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			got := make([]byte, len(tt.want))
			if _, err := io.ReadFull(br, got); err != nil || string(got) != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
			if !tt.closed {
				// The connection stays open: a second request is answered.
				send(t, nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
				if _, err := io.ReadFull(br, got); err != nil || string(got) != tt.want {
					t.Fatalf("second answer %q, %v", got, err)
				}
				return
			}
			if n, err := br.Read(got); err != io.EOF {
				t.Errorf("after the answer: read %d, %v; want EOF", n, err)
			}
		})
	}
}

func TestConnectionCloseAndHead(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.OK("body"))
	nc, br := dial(t, s.Addr())
	send(t, nc, "HEAD / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	// HEAD: Content-Length but no body. Connection: close: said, then done.
	want := "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbody"
	got, err := io.ReadAll(br)
	if err != nil || string(got) != want {
		t.Errorf("got %q, %v; want %q then EOF", got, err, want)
	}
}

func TestSilent(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.Silent())
	nc, br := dial(t, s.Addr())
	send(t, nc, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
	if !s.WaitRequests(1, 5*time.Second) {
		t.Fatal("request not recorded")
	}
	nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := br.Read(make([]byte, 1)); !isTimeout(err) {
		t.Errorf("read from a silent upstream: %v, want a timeout", err)
	}
	s.Close() // the silent connection is closed only now
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read after Close: %v, want EOF", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestStreamingDuplex(t *testing.T) {
	s := upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
		half := make([]byte, 5)
		if _, err := io.ReadFull(body, half); err != nil {
			return
		}
		c.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + string(half))
		rest, err := io.ReadAll(body)
		if err != nil {
			return
		}
		c.WriteString(string(rest))
	})
	nc, br := dial(t, s.Addr())
	send(t, nc, "POST /d HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello")
	want := "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"
	got := make([]byte, len(want))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
		t.Fatalf("first half %q, %v", got, err)
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("request recorded before its body was read: %d", n)
	}
	send(t, nc, "world")
	got = got[:5]
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "world" {
		t.Fatalf("second half %q, %v", got, err)
	}
	if !s.WaitRequests(1, 5*time.Second) {
		t.Fatal("request not recorded")
	}
	if r := s.Requests()[0]; string(r.Decoded) != "helloworld" || !r.Complete {
		t.Errorf("recorded %q complete %v", r.Decoded, r.Complete)
	}
}

func TestExpectContinue(t *testing.T) {
	s := upstreamtest.StartStreaming(t, upstreamtest.Continue(upstreamtest.Echo()))
	nc, br := dial(t, s.Addr())
	send(t, nc, "PUT /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	if resp := mustResponse(t, br); resp.status != "HTTP/1.1 100 Continue" {
		t.Fatalf("interim response %+v", resp)
	}
	send(t, nc, "abc")
	if resp := mustResponse(t, br); resp.status != "HTTP/1.1 200 OK" || resp.body != "abc" {
		t.Fatalf("final response %+v", resp)
	}
}

func TestEarlyRejectWithoutBody(t *testing.T) {
	s := upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
		c.Respond(417, "")
		c.Close()
	})
	nc, br := dial(t, s.Addr())
	send(t, nc, "PUT /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	if resp := mustResponse(t, br); resp.status != "HTTP/1.1 417 Expectation Failed" {
		t.Fatalf("response %+v", resp)
	}
	if !s.WaitRequests(1, 5*time.Second) {
		t.Fatal("request not recorded")
	}
	if r := s.Requests()[0]; r.Complete || len(r.RawBody) != 0 {
		t.Errorf("recorded body %q complete %v; want none", r.RawBody, r.Complete)
	}
}

func TestTruncatedRequestBody(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.OK(""))
	nc, _ := dial(t, s.Addr())
	send(t, nc, "POST /t HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	nc.Close()
	if !s.WaitRequests(1, 5*time.Second) {
		t.Fatal("request not recorded")
	}
	if r := s.Requests()[0]; r.Complete || string(r.RawBody) != "abc" {
		t.Errorf("recorded %q complete %v", r.RawBody, r.Complete)
	}
	if errs := s.Errors(); len(errs) != 0 {
		t.Errorf("errors %v", errs)
	}
}

func TestMalformedRequest(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.OK("x"))
	nc, br := dial(t, s.Addr())
	send(t, nc, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	if resp := mustResponse(t, br); resp.status != "HTTP/1.1 400 Bad Request" {
		t.Errorf("response %+v", resp)
	}
	if _, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read: %v, want EOF", err)
	}
	errs := s.Errors()
	var re *upstreamtest.ReadError
	if len(errs) != 1 || !errors.Is(errs[0], upstreamtest.ErrMalformed) || !errors.As(errs[0], &re) || re.Conn != 1 || re.Seq != 1 {
		t.Errorf("errors %v", errs)
	}
	if len(s.Requests()) != 0 {
		t.Errorf("recorded %+v", s.Requests())
	}
}

func TestDead(t *testing.T) {
	addr := upstreamtest.Dead(t)
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial: %v, want ECONNREFUSED", err)
	}
	// No server of another test may take the port and answer for it.
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Errorf("listening on %s succeeded while it is reserved", addr)
	}
}

func TestWaitRequestsTimesOut(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.OK(""))
	if s.WaitRequests(1, 20*time.Millisecond) {
		t.Error("WaitRequests reported a request that never came")
	}
}

// TestCloseLeavesNoGoroutines closes a server with connections in every
// state and checks that its goroutines are gone. It must not run in
// parallel with other tests.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()

	s := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		switch r.Target {
		case "/silent":
			c.Silence()
		case "/close":
			c.Close()
		case "/wait":
			<-c.Done()
		default:
			c.Respond(200, "")
		}
	})
	var conns []net.Conn
	for _, req := range []string{
		"GET /silent HTTP/1.1\r\n\r\n",
		"GET /close HTTP/1.1\r\n\r\n",
		"GET /wait HTTP/1.1\r\n\r\n",
		"GET /idle HTTP/1.1\r\n\r\n",
		"POST /body HTTP/1.1\r\nContent-Length: 10\r\n\r\nab",
		"GET /half-a-head HTTP/1.1\r\n",
	} {
		nc, _ := dial(t, s.Addr())
		send(t, nc, req)
		conns = append(conns, nc)
	}
	if !s.WaitRequests(4, 5*time.Second) {
		t.Fatalf("recorded %d requests", len(s.Requests()))
	}
	wait.For(t, "every connection accepted", func() bool { return s.Accepts() >= len(conns) })
	s.Close()
	for _, nc := range conns {
		nc.Close()
	}

	if !wait.Until(wait.Timeout, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
	}
}

// TestStartTLS: a TLS server answers through TLS, tells the handler the
// name the client asked for, and its CloseNotify sends a close_notify
// without a FIN, its Close both.
func TestStartTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "upstreamtest CA")
	cfg := &tls.Config{Certificates: []tls.Certificate{*ca.Server(t, "up.test").TLS}}
	s := upstreamtest.StartTLS(t, cfg, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		st, ok := c.TLS()
		c.Respond(200, fmt.Sprintf("%v %s", ok, st.ServerName))
		switch r.Target {
		case "/notify":
			c.CloseNotify()
		case "/close":
			c.Close()
		}
	})
	for _, path := range []string{"/notify", "/close"} {
		nc, _ := dial(t, s.Addr())
		tc := tls.Client(nc, &tls.Config{RootCAs: ca.Pool(), ServerName: "up.test"})
		br := bufio.NewReader(tc)
		send(t, tc, "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := readResponse(br)
		if err != nil || resp.body != "true up.test" {
			t.Fatalf("%s: %+v, %v", path, resp, err)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("%s: after the response, %v; want a close_notify (io.EOF)", path, err)
		}
		// Behind the close_notify, a FIN only after Close. (No FIN
		// within 100 ms stands for none after CloseNotify.)
		wait := 100 * time.Millisecond
		if path == "/close" {
			wait = 5 * time.Second
		}
		nc.SetReadDeadline(time.Now().Add(wait))
		_, err = nc.Read(make([]byte, 1))
		if fin := err == io.EOF; fin != (path == "/close") {
			t.Fatalf("%s: the TCP connection then read %v", path, err)
		}
	}
}
