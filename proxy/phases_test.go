package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// phased is a Handler with request, response and failure phases given as
// functions.
type phased struct {
	*rotate
	request  func(s *Session) *Response
	response func(s *Session, resp *h1.Response)
	fail     func(s *Session, e *fault.Error) *Response
}

func (h *phased) RequestFilter(s *Session) *Response {
	if h.request == nil {
		return nil
	}
	return h.request(s)
}

func (h *phased) ResponseFilter(s *Session, _ *Peer, resp *h1.Response) {
	if h.response != nil {
		h.response(s, resp)
	}
}

func (h *phased) FailToProxy(s *Session, e *fault.Error) *Response {
	if h.fail == nil {
		return nil
	}
	return h.fail(s, e)
}

// stored is a Response that stands in for an upstream's: a stream of
// unknown length with a trailer, and a reason phrase of its own.
func stored() *Response {
	r := &Response{Status: 200, Reason: "Stored", AsUpstream: true,
		Stream: &StreamBody{Reader: strings.NewReader("hello from the store"), Size: -1}}
	r.Header.Add("Content-Type", "text/plain")
	r.Header.Add("Connection", "close") // hop-by-hop: not passed on
	r.Trailers.Add("X-Digest", "abc")
	return r
}

// TestAsUpstream: a Response that stands in for an upstream's goes
// through the response phases (ResponseFilter) as an upstream's does, to
// HTTP/1.1 and HTTP/2 clients alike, its stream body and trailers
// included; so does one FailToProxy hands back for a request no upstream
// answered (a stale stored copy, say).
func TestAsUpstream(t *testing.T) {
	filtered := func(_ *Session, resp *h1.Response) { resp.Header.Add("X-Filtered", "yes") }
	dead := upstreamtest.Dead(t)
	for _, tt := range []struct {
		name string
		h    *phased
	}{
		{"request filter", &phased{rotate: peers(testOptions()), request: func(*Session) *Response { return stored() }, response: filtered}},
		{"fail to proxy", &phased{rotate: peers(testOptions(), dead), response: filtered,
			fail: func(*Session, *fault.Error) *Response { return stored() }}},
	} {
		t.Run(tt.name+", HTTP/1.1", func(t *testing.T) {
			hs := start(t, tt.h)
			c := hs.dial(t)
			resp, body := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			if resp.Status != "200 Stored" || body != "hello from the store" || resp.Header.Get("X-Filtered") != "yes" ||
				resp.Trailer.Get("X-Digest") != "abc" || resp.Header.Get("Connection") == "close" {
				t.Fatalf("%q %q, header %v, trailer %v", resp.Status, body, resp.Header, resp.Trailer)
			}
			// The connection carries the next request.
			if resp, body := c.roundTrip("HEAD / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 || body != "" {
				t.Fatalf("HEAD: %d %q", resp.StatusCode, body)
			}
		})
		t.Run(tt.name+", HTTP/2", func(t *testing.T) {
			hs, client := startH2(t, tt.h, h2c())
			resp, err := client.Get("http://" + hs.addr + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "hello from the store" || resp.Header.Get("X-Filtered") != "yes" ||
				resp.Trailer.Get("X-Digest") != "abc" {
				t.Fatalf("%d %q, header %v, trailer %v", resp.StatusCode, body, resp.Header, resp.Trailer)
			}
		})
	}
}

// recordingTee records what a ResponseTee is told.
type recordingTee struct {
	mu       sync.Mutex
	status   int
	body     strings.Builder
	trailers string
	ended    string // "end" or "abort", once
	calls    int
	done     chan struct{}
}

func newTee() *recordingTee { return &recordingTee{done: make(chan struct{})} }

func (r *recordingTee) Head(resp *h1.Response) { r.mu.Lock(); r.status = resp.Status; r.mu.Unlock() }
func (r *recordingTee) Body(p []byte)          { r.mu.Lock(); r.body.Write(p); r.mu.Unlock() }
func (r *recordingTee) End(t *h1.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t != nil {
		r.trailers = t.String()
	}
	r.ended += "end"
	r.calls++
	close(r.done)
}
func (r *recordingTee) Abort() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended += "abort"
	r.calls++
	close(r.done)
}

// result waits for the tee to hear how the response ended: a test that
// would hang without it fails instead.
func (r *recordingTee) result() (int, string, string, string) {
	select {
	case <-r.done:
	case <-time.After(wait.Timeout):
		return 0, "", "", "never told how it ended"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status, r.body.String(), r.trailers, r.ended
}

// TestTee: a tee sees the upstream's response as it came, its data only
// (never the chunked framing an HTTP/1.1 client gets byte for byte) and its
// trailers, and is told exactly once how it ended: whole, cut, or never
// come.
func TestTee(t *testing.T) {
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n"
	tests := []struct {
		name    string
		up      upstreamtest.Handler
		status  int
		body    string
		trailer string
		ended   string
	}{
		{"chunked, passed through", upstreamtest.Raw(chunked), 200, "hello world", "X-T: 1\r\n", "end"},
		{"content-length", upstreamtest.OK("plain body"), 200, "plain body", "", "end"},
		{"cut mid-body", upstreamtest.Truncated(), 200, "", "", "abort"},
		{"no answer", upstreamtest.ResetAfterRead(), 0, "", "", "abort"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := upstreamtest.Start(t, tt.up)
			tee := newTee()
			h := &phased{rotate: peers(testOptions(), up.Addr()), request: func(s *Session) *Response {
				s.Tee(tee, false)
				return nil
			}}
			hs := start(t, h)
			c := hs.dial(t)
			c.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			if tt.name == "chunked, passed through" {
				// The client gets the chunked body as it came.
				body := "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n"
				var raw []byte
				for !strings.HasSuffix(string(raw), body) {
					b, err := c.br.ReadByte()
					if err != nil {
						t.Fatalf("the client got %q, then %v", raw, err)
					}
					raw = append(raw, b)
				}
			} else {
				readHTTP(c)
			}
			status, body, trailer, ended := tee.result()
			if status != tt.status || (tt.ended == "end" && body != tt.body) || trailer != tt.trailer || ended != tt.ended {
				t.Errorf("tee saw %d %q, trailers %q, %q; want %d %q %q %q", status, body, trailer, ended, tt.status, tt.body, tt.trailer, tt.ended)
			}
		})
	}
}

// TestTeeWhole: with a tee that wants the response whole, an HTTP/2
// client that resets its stream mid-body does not cut the try: the
// upstream's body is read to its end and the tee is told it came whole.
// Without, the reset cuts the wait and the tee is told it was cut.
func TestTeeWhole(t *testing.T) {
	// The wait is cut at once at a reset: no grace for an answer about to
	// come, which would let a try end whole without the tee's say.
	defer func(g time.Duration) { cancelGrace = g }(cancelGrace)
	cancelGrace = 0
	for _, whole := range []bool{true, false} {
		release := make(chan struct{})
		up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
			c.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfirst")
			select {
			case <-release:
			case <-time.After(wait.Timeout): // a failed test released nothing
			}
			c.WriteString("-last")
		})
		tee := newTee()
		h := &phased{rotate: peers(testOptions(), up.Addr()), request: func(s *Session) *Response {
			s.Tee(tee, whole)
			return nil
		}}
		hs, client := startH2(t, h, h2c())
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+hs.addr+"/", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		io.ReadFull(resp.Body, buf)
		cancel() // the client resets its stream with half the body
		resp.Body.Close()
		if whole {
			// The try goes on: the rest comes once released, as late as
			// the client's reset reached the proxy.
			wait.For(t, "the reset to reach the proxy", func() bool { return streamsGone(hs.srv) })
			close(release)
		} else {
			// The try is cut at once: the tee hears of it before the
			// upstream sends more.
			tee.result()
			close(release)
		}
		_, body, _, ended := tee.result()
		if whole && (ended != "end" || body != "first-last") || !whole && ended != "abort" {
			t.Errorf("whole %v: the tee saw %q, %q", whole, body, ended)
		}
	}
}

// TestReadBody: a phase reads the request body whole before it goes
// upstream; a chunked body then goes on chunked with its trailers, and one
// over the bound is answered 413 without reaching the upstream.
func TestReadBody(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	var seen string
	h := &phased{rotate: peers(testOptions(), up.Addr()), request: func(s *Session) *Response {
		b, err := s.ReadBody(16)
		if err != nil {
			return s.ErrorResponse(err)
		}
		seen = string(b)
		return nil
	}}
	hs := start(t, h)
	resp, body := hs.do(t, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n")
	if resp.StatusCode != 200 || body != "hello world" || seen != "hello world" {
		t.Fatalf("%d %q, the phase saw %q", resp.StatusCode, body, seen)
	}
	got := up.Requests()[0]
	if len(got.Trailer) != 1 || got.Trailer[0].Value != "1" {
		t.Errorf("the upstream got trailers %v, want X-T: 1", got.Trailer)
	}
	resp, _ = hs.do(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 17\r\n\r\n0123456789abcdefg")
	if resp.StatusCode != 413 || resp.Header.Get("Proxy-Status") == "" {
		t.Errorf("over the bound: %d %q, want 413 with Proxy-Status", resp.StatusCode, resp.Header.Get("Proxy-Status"))
	}
	if n := len(up.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests, want 1", n)
	}
}

// TestReadBodyWaitsWithinBodyTimeout: a phase reading the body whole
// waits for the part not yet at hand within the server's body timeout,
// not the head's (an hour here), though the part that came with the head
// is read without a deadline: a client that stops halfway gets 408, and
// the upstream hears nothing.
func TestReadBodyWaitsWithinBodyTimeout(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	var readErr *fault.Error
	h := &phased{rotate: peers(testOptions(), up.Addr()), request: func(s *Session) *Response {
		_, err := s.ReadBody(1 << 10)
		if err != nil {
			readErr = err
			return s.ErrorResponse(err)
		}
		return nil
	}}
	hs := start(t, h, func(srv *Server) {
		srv.HeaderTimeout = time.Hour
		srv.BodyTimeout = 50 * time.Millisecond
	})
	resp, _ := hs.do(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n01234")
	if resp.StatusCode != 408 || readErr == nil || readErr.Kind != fault.ClientTimeout {
		t.Errorf("a body stopped halfway: %d, the phase got %v; want 408, a client timeout", resp.StatusCode, readErr)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

// TestOnce: a GET the pool's stale connection fails is retried, unless a
// phase marked it as one that must reach the upstream at most once.
func TestOnce(t *testing.T) {
	for _, once := range []bool{false, true} {
		up := upstreamtest.Start(t, upstreamtest.AnswerFirstThenDrop())
		h := &phased{rotate: peers(testOptions(), up.Addr()), request: func(s *Session) *Response {
			if once && s.Request.Header.Has("X-Once") {
				s.Once()
			}
			return nil
		}}
		hs := start(t, h)
		if st, _ := hs.get(t, "/first"); st != 200 {
			t.Fatalf("first: %d", st)
		}
		wait.For(t, "the connection pooled", func() bool { return hs.srv.Pool.Stats().Idle == 1 })
		resp, _ := hs.do(t, "GET /again HTTP/1.1\r\nHost: a\r\nX-Once: 1\r\n\r\n")
		want := http.StatusOK
		if once {
			want = http.StatusBadGateway
		}
		if resp.StatusCode != want {
			t.Errorf("once %v: %d, want %d", once, resp.StatusCode, want)
		}
	}
}

// streamsGone reports whether the client of every HTTP/2 stream srv serves
// has reset it (and there is one).
func streamsGone(srv *Server) bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	n, live := 0, 0
	for c := range srv.conns {
		c.eachStream(func(x *h2exchange) {
			n++
			select {
			case <-x.st.Done():
			default:
				live++
			}
		})
	}
	return n > 0 && live == 0
}
