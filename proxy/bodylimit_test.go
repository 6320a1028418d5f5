package proxy

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/h2"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/retry"
)

// limiting bounds every request body with LimitBody, and forces a retry
// after every failure (as a careless hook might): the body limit's refusal
// must hold anyway.
type limiting struct {
	*forcing
	max int64
}

func (h *limiting) RequestFilter(s *Session) *Response {
	s.LimitBody(h.max + 100) // the lower limit holds
	s.LimitBody(h.max)
	s.LimitBody(h.max + 50)
	return nil
}

// counting is an upstream that reads each request's body as it comes,
// counting the bytes it got, and answers once the body ended.
type counting struct {
	mu   sync.Mutex
	got  int // body bytes received, over all requests
	more chan struct{}
}

func newCounting() *counting { return &counting{more: make(chan struct{}, 100)} }

func (u *counting) handle(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
	buf := make([]byte, 512)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			u.mu.Lock()
			u.got += n
			u.mu.Unlock()
			select {
			case u.more <- struct{}{}:
			default:
			}
		}
		if err == io.EOF {
			c.Respond(200, "got it")
			return
		}
		if err != nil {
			return // cut short
		}
	}
}

func (u *counting) received() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got
}

// await waits until n body bytes have been received, for at most
// wait.Timeout, and reports whether they were: for a goroutine that is
// not the test's.
func (u *counting) await(n int) bool {
	timeout := time.NewTimer(wait.Timeout)
	defer timeout.Stop()
	for u.received() < n {
		select {
		case <-u.more: // sent after each read, unless a signal is pending already
		case <-timeout.C:
			return false
		}
	}
	return true
}

// limitPolicy would retry anything, a POST sent whole included.
func limitPolicy() *PeerOptions {
	return withPolicy(&retry.Policy{Tries: 3, On: retry.OnError | retry.OnTimeout, NonIdempotent: retry.Always})
}

// TestBodyLimitHTTP1 checks LimitBody over HTTP/1.1: a Content-Length over
// the limit is answered 413 and the upstream never hears of the request,
// even when the client waits for 100 Continue; a chunked body is cut at the
// chunk that takes it past the limit, the try aborted (the upstream never
// gets a complete request, nor more than the limit), never retried, and
// the client answered 413; bodies within the limit pass whole.
func TestBodyLimitHTTP1(t *testing.T) {
	const max = 1000
	tests := []struct {
		name string
		// head is sent first; then, once the upstream has what it was
		// sent (when there is an upstream exchange), rest.
		head, rest string
		want       int
		upstream   bool // a try is made
		complete   bool // the upstream gets the whole body
		noted      bool // body_limit=exceeded in the access log
	}{
		{"length at the limit", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n" + strings.Repeat("a", max), "",
			200, true, true, false},
		{"length over the limit", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n" + strings.Repeat("a", max+1), "",
			413, false, false, true},
		{"length over the limit, large", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10000000\r\n\r\n" + strings.Repeat("a", 100), "",
			413, false, false, true},
		{"expect 100-continue over the limit", "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n", "",
			413, false, false, true},
		{"chunked within the limit", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1f4\r\n" + strings.Repeat("b", 500) + "\r\n",
			"1f4\r\n" + strings.Repeat("b", 500) + "\r\n0\r\n\r\n", 200, true, true, false},
		{"chunked past the limit", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1f4\r\n" + strings.Repeat("b", 500) + "\r\n",
			"1f5\r\n" + strings.Repeat("b", 501) + "\r\n0\r\n\r\n", 413, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newCounting()
			up := upstreamtest.StartStreaming(t, u.handle)
			h := &limiting{forcing: forceInOrder(limitPolicy(), up.Addr()), max: max}
			hs := start(t, h)
			c := hs.dial(t)
			c.send(tt.head)
			if tt.rest != "" {
				// The first chunk went upstream before the rest is sent.
				wait.For(t, "the first chunk upstream", func() bool { return u.received() >= 500 })
				c.send(tt.rest)
			}
			br := c.br
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the status line: %v", err)
			}
			if want := "HTTP/1.1 " + strconv.Itoa(tt.want) + " "; !strings.HasPrefix(line, want) {
				t.Fatalf("status line %q, want %s (no 100 Continue first)", line, want)
			}
			resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(line), br)), nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if tt.want == 413 {
				if ps := resp.Header.Get("Proxy-Status"); !strings.Contains(ps, "error=http_request_error") {
					t.Errorf("Proxy-Status %q, want error=http_request_error", ps)
				}
				c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
				if n, err := io.Copy(io.Discard, br); !resp.Close || err != nil {
					t.Errorf("connection not closed after the 413 (Connection: close %v; %d more bytes, %v)", resp.Close, n, err)
				}
			}
			wait.For(t, "the access log line", func() bool { return strings.Count(hs.access.String(), "\n") == 1 })
			log := hs.access.String()
			if noted := strings.Contains(log, " body_limit=exceeded"); noted != tt.noted {
				t.Errorf("access log %q: body_limit noted %v, want %v", log, noted, tt.noted)
			}
			if !tt.upstream {
				if up.Accepts() != 0 || u.received() != 0 {
					t.Errorf("the upstream got %d connections, %d body bytes; want none", up.Accepts(), u.received())
				}
				return
			}
			if !up.WaitRequests(1, 5*time.Second) {
				t.Fatal("the upstream recorded no request")
			}
			reqs := up.Requests()
			if len(reqs) != 1 || up.Accepts() != 1 {
				t.Fatalf("the upstream got %d requests on %d connections, want 1 (never retried)", len(reqs), up.Accepts())
			}
			if r := reqs[0]; r.Complete != tt.complete || len(r.Decoded) > max {
				t.Errorf("the upstream got %d body bytes, complete %v; want at most %d, complete %v",
					len(r.Decoded), r.Complete, max, tt.complete)
			}
			if !tt.complete && !strings.Contains(log, "tries=1") {
				t.Errorf("access log %q: want tries=1", log)
			}
		})
	}
}

// TestBodyLimitAfterResponseStarted checks a chunked body that goes past
// the limit after the upstream's response began to go to the client:
// nothing more of the body goes upstream, and the client's connection is
// cut rather than finished with a response that looks complete.
func TestBodyLimitAfterResponseStarted(t *testing.T) {
	const max = 1000
	started := make(chan struct{})
	var mu sync.Mutex
	var got int
	up := upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
		c.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
		close(started)
		buf := make([]byte, 512)
		for {
			n, err := body.Read(buf)
			mu.Lock()
			got += n
			mu.Unlock()
			if err != nil {
				return
			}
		}
	})
	h := &limiting{forcing: forceInOrder(limitPolicy(), up.Addr()), max: max}
	hs := start(t, h)
	c := hs.dial(t)
	c.send("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1f4\r\n" + strings.Repeat("b", 500) + "\r\n")
	resp, err := readHTTP(c)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("response %v, %v; want the upstream's 200", resp, err)
	}
	<-started
	c.send("1f5\r\n" + strings.Repeat("b", 501) + "\r\n0\r\n\r\n")
	if b, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("the response ended cleanly (%q); want the connection cut", b)
	}
	wait.For(t, "the access log line", func() bool { return strings.Count(hs.access.String(), "\n") == 1 })
	if log := hs.access.String(); !strings.Contains(log, "aborted=true") || !strings.Contains(log, " body_limit=exceeded") {
		t.Errorf("access log %q: want aborted=true and body_limit=exceeded", log)
	}
	mu.Lock()
	defer mu.Unlock()
	if got > max {
		t.Errorf("the upstream got %d body bytes, over the limit of %d", got, max)
	}
	if up.Accepts() != 1 {
		t.Errorf("the upstream got %d connections, want 1", up.Accepts())
	}
}

// TestBodyLimitHTTP2 checks LimitBody for HTTP/2 clients: a content-length
// over the limit is answered 413 without an upstream exchange; a body
// without one is cut where it goes past the limit, and answered 413.
func TestBodyLimitHTTP2(t *testing.T) {
	const max = 1000
	tests := []struct {
		name     string
		length   int64 // -1: none
		parts    []int // body bytes written, waiting for the upstream after each but the last
		want     int
		upstream bool
	}{
		{"length within", 1000, []int{1000}, 200, true},
		{"length over", 1001, []int{1001}, 413, false},
		{"no length, within", -1, []int{600, 400}, 200, true},
		{"no length, past the limit", -1, []int{600, 401}, 413, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newCounting()
			up := upstreamtest.StartStreaming(t, u.handle)
			h := &limiting{forcing: forceInOrder(limitPolicy(), up.Addr()), max: max}
			hs, client := startH2(t, h, h2c())
			pr, pw := io.Pipe()
			go func() {
				sent := 0
				for i, n := range tt.parts {
					if _, err := pw.Write([]byte(strings.Repeat("c", n))); err != nil {
						return
					}
					sent += n
					if i < len(tt.parts)-1 && !u.await(sent) {
						pw.CloseWithError(errors.New("the upstream did not get the part sent"))
						return
					}
				}
				pw.Close()
			}()
			req, _ := http.NewRequest("POST", "http://"+hs.addr+"/", pr)
			req.ContentLength = tt.length
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			pr.CloseWithError(io.ErrClosedPipe)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.want)
			}
			if tt.want == 413 && !strings.Contains(resp.Header.Get("Proxy-Status"), "http_request_error") {
				t.Errorf("Proxy-Status %q", resp.Header.Get("Proxy-Status"))
			}
			wait.For(t, "the access log line", func() bool { return strings.Count(hs.access.String(), "\n") == 1 })
			if noted := strings.Contains(hs.access.String(), " body_limit=exceeded"); noted != (tt.want == 413) {
				t.Errorf("access log %q: body_limit noted %v", hs.access.String(), noted)
			}
			if !tt.upstream {
				if up.Accepts() != 0 {
					t.Errorf("the upstream got %d connections, want none", up.Accepts())
				}
				return
			}
			if !up.WaitRequests(1, 5*time.Second) {
				t.Fatal("the upstream recorded no request")
			}
			reqs := up.Requests()
			if len(reqs) != 1 || up.Accepts() != 1 {
				t.Fatalf("the upstream got %d requests on %d connections, want 1", len(reqs), up.Accepts())
			}
			if r := reqs[0]; r.Complete != (tt.want == 200) || len(r.Decoded) > max {
				t.Errorf("the upstream got %d body bytes, complete %v", len(r.Decoded), r.Complete)
			}
		})
	}
}

// late sets a body limit too late: from UpstreamRequestFilter, after the
// RequestFilter stage. It must do nothing.
type late struct{ *rotate }

func (h *late) UpstreamRequestFilter(s *Session, _ *Peer, _ *h1.Request) { s.LimitBody(1) }

func TestLimitBodyLate(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	hs := start(t, &late{peers(testOptions(), up.Addr())})
	for _, req := range []string{
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n0\r\n\r\n",
	} {
		if resp, body := hs.do(t, req); resp.StatusCode != 200 || body != "0123456789" {
			t.Errorf("%q: %d %q, want the body through", req, resp.StatusCode, body)
		}
	}
}

// TestBodyLimitH2Upstream checks a chunked body cut at the limit on its way
// to an HTTP/2 upstream: the stream is reset, so the upstream never sees
// the request end, it got no more than the limit, and the client gets 413.
func TestBodyLimitH2Upstream(t *testing.T) {
	const max = 1000
	var mu sync.Mutex
	var got int
	var ended, cut bool
	up := startH2Upstream(t, nil, nil, func(c *h2.Conn, st *h2.Stream) {
		buf := make([]byte, 512)
		for {
			n, err := st.Read(buf)
			mu.Lock()
			got += n
			ended = ended || err == io.EOF
			cut = cut || err != nil && err != io.EOF
			mu.Unlock()
			if err == io.EOF {
				st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-length", Value: "2"}}, []byte("ok"), true)
				return
			}
			if err != nil {
				return
			}
		}
	})
	h := &limiting{forcing: forceInOrder(h2Options(ProtocolH2C, nil), up.addr()), max: max}
	hs := start(t, h)
	c := hs.dial(t)
	c.send("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1f4\r\n" + strings.Repeat("b", 500) + "\r\n")
	wait.For(t, "the first chunk upstream", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got >= 500
	})
	c.send("1f5\r\n" + strings.Repeat("b", 501) + "\r\n0\r\n\r\n")
	resp, _ := c.response("POST")
	if resp.StatusCode != 413 {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
	wait.For(t, "the upstream stream cut", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return cut || ended
	})
	mu.Lock()
	defer mu.Unlock()
	if ended || got > max {
		t.Errorf("the upstream got %d body bytes, the end %v; want at most %d, never the end", got, ended, max)
	}
}
