package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/retry"
)

// forcing picks peers in order and forces a retry after every failure, as a
// careless hook might. The hard limits must hold anyway.
type forcing struct {
	ordered
	mu    sync.Mutex
	facts []retry.Facts
	wrote []int64 // of each try, as TryDone saw it
}

func (h *forcing) TryDone(_ *Session, a *Attempt) {
	h.mu.Lock()
	h.wrote = append(h.wrote, a.Wrote)
	h.mu.Unlock()
}

var (
	_ ErrorWhileProxy = (*forcing)(nil)
	_ FailToConnect   = (*forcing)(nil)
)

func (h *forcing) force(e *fault.Error, f retry.Facts) *fault.Error {
	h.mu.Lock()
	h.facts = append(h.facts, f)
	h.mu.Unlock()
	e.Retry, e.Why = true, "retrying: the hook says so"
	return e
}

func (h *forcing) ErrorWhileProxy(_ *Session, _ *Peer, e *fault.Error, f retry.Facts) *fault.Error {
	return h.force(e, f)
}

func (h *forcing) FailToConnect(_ *Session, _ *Peer, e *fault.Error, f retry.Facts) *fault.Error {
	return h.force(e, f)
}

func (h *forcing) seen() []retry.Facts {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]retry.Facts(nil), h.facts...)
}

func forceInOrder(opts *PeerOptions, addrs ...string) *forcing {
	return &forcing{ordered: *inOrder(opts, addrs...)}
}

// TestHooksCannotLiftHardLimits forces a retry after every failure against
// each hard limit in turn. Whatever the hook says, the limit holds: the next
// server (B) never sees the request, or sees it whole.
func TestHooksCannotLiftHardLimits(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 200<<10/16) // 200 KiB, over body_buffer
	halfUp := make(chan struct{}, 1)                            // "client side failed": A got the body's first half
	tests := []struct {
		name string
		// a starts the first server (nil: a dead address); pol is the
		// policy.
		a   func(t *testing.T) *upstreamtest.Server
		pol *retry.Policy
		// send writes the request and returns what the client got.
		send func(t *testing.T, c *client) (fullResponse, error)
		// want is the client's status (0: no complete response), and
		// why the limit named in the log.
		want   int
		why    string
		aSends int // how often A saw the request
	}{
		{
			name: "body no longer held whole",
			a: func(t *testing.T) *upstreamtest.Server {
				// A reads about half the body and resets, as a crashing
				// process would.
				return upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
					io.ReadFull(body, make([]byte, 100<<10))
					c.Reset()
				})
			},
			pol: &retry.Policy{NonIdempotent: retry.Always},
			send: func(t *testing.T, c *client) (fullResponse, error) {
				c.send(fmt.Sprintf("POST /search HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", len(big), big))
				return readFull(c)
			},
			want: 502, why: "body_buffer", aSends: 1,
		},
		{
			// No hook is asked here (nothing could be retried); the
			// forcing hook must not change that.
			name: "response already going to the client",
			a:    func(t *testing.T) *upstreamtest.Server { return upstreamtest.Start(t, upstreamtest.Truncated()) },
			pol:  &retry.Policy{},
			send: func(t *testing.T, c *client) (fullResponse, error) {
				c.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
				return readFull(c)
			},
			want: 0, why: "had started going to the client", aSends: 1,
		},
		{
			name: "client side failed",
			a: func(t *testing.T) *upstreamtest.Server {
				// A waits for the whole body, which never comes.
				return upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
					if _, err := io.ReadFull(body, make([]byte, 4)); err == nil {
						halfUp <- struct{}{}
					}
					io.Copy(io.Discard, body)
				})
			},
			pol: &retry.Policy{},
			send: func(t *testing.T, c *client) (fullResponse, error) {
				c.send("PUT /f HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhalf")
				<-halfUp // the body is on its way
				c.nc.(*net.TCPConn).CloseWrite()
				return readFull(c)
			},
			want: 0, why: "client side failed", aSends: 1,
		},
		{
			name: "tries used up",
			a:    func(t *testing.T) *upstreamtest.Server { return upstreamtest.Start(t, upstreamtest.ResetAfterRead()) },
			pol:  &retry.Policy{Tries: 2},
			send: func(t *testing.T, c *client) (fullResponse, error) {
				c.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
				return readFull(c)
			},
			want: 502, why: "tries exhausted (2 of 2)", aSends: 2,
		},
		{
			name: "retry timeout passed",
			pol:  &retry.Policy{Timeout: time.Nanosecond},
			send: func(t *testing.T, c *client) (fullResponse, error) {
				c.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
				return readFull(c)
			},
			want: 502, why: "retry timeout 1ns passed",
		},
		{
			name: "retry budget empty",
			pol:  &retry.Policy{Budget: retry.NewBudget(0, 0, nil)},
			send: func(t *testing.T, c *client) (fullResponse, error) {
				c.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
				return readFull(c)
			},
			want: 502, why: "retry budget exhausted",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a *upstreamtest.Server
			addr := upstreamtest.Dead(t)
			if tt.a != nil {
				a = tt.a(t)
				addr = a.Addr()
			}
			// With tries left, the forced retry would go to B: B must see
			// nothing.
			b := upstreamtest.Start(t, upstreamtest.Echo())
			addrs := []string{addr, b.Addr()}
			if tt.pol.Tries == 2 {
				addrs = addrs[:1] // the same server again, twice at most
			}
			h := forceInOrder(withPolicy(tt.pol), addrs...)
			hs := start(t, h)
			resp, err := tt.send(t, hs.dial(t))
			switch {
			case tt.want == 0 && err == nil:
				t.Fatalf("the client got a complete response (%d) from a cut one", resp.status)
			case tt.want != 0 && (err != nil || resp.status != tt.want):
				t.Fatalf("client got %d, %v; want %d", resp.status, err, tt.want)
			case tt.want >= 500 && resp.proxyStatus == "":
				t.Fatal("no Proxy-Status")
			}
			if n := b.Accepts(); n != 0 {
				t.Fatalf("B was sent the request (%d connections)", n)
			}
			if a != nil {
				a.WaitRequests(tt.aSends, 2*time.Second)
				if n := len(a.Requests()); n != tt.aSends {
					t.Fatalf("A saw the request %d times, want %d", n, tt.aSends)
				}
			}
			wait.For(t, "the log to say why", func() bool { return strings.Contains(hs.errors.String(), tt.why) })
			if len(h.seen()) == 0 && tt.want != 0 {
				t.Fatal("the hook was never asked")
			}
		})
	}
}

// TestTimedOutServerGetsNoSecondTry: a try that timed out after the
// request was sent goes to another server or becomes the answer; the same
// server never gets the request again because it was slow, whatever tries
// and hooks say.
func TestTimedOutServerGetsNoSecondTry(t *testing.T) {
	tests := []struct {
		name    string
		servers int  // all silent
		fast    bool // and one more that answers
		force   bool // a hook forcing every retry
		status  int
	}{
		{"one slow server", 1, false, false, 504},
		{"one slow server, forced", 1, false, true, 504},
		{"two slow servers", 2, false, false, 504},
		{"slow then fast", 1, true, false, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var slow []*upstreamtest.Server
			var addrs []string
			for i := 0; i < tt.servers; i++ {
				u := upstreamtest.Start(t, upstreamtest.Silent())
				slow = append(slow, u)
				addrs = append(addrs, u.Addr())
			}
			if tt.fast {
				addrs = append(addrs, upstreamtest.Start(t, upstreamtest.OK("fast")).Addr())
			}
			opts := withPolicy(&retry.Policy{Tries: 3, Timeout: -1})
			var h Handler
			if tt.force {
				f := forceInOrder(opts, addrs...)
				f.silent(tt.servers, 200*time.Millisecond)
				h = f
			} else {
				o := inOrder(opts, addrs...)
				o.silent(tt.servers, 200*time.Millisecond)
				h = o
			}
			hs := start(t, h)
			resp, body := hs.do(t, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, body, tt.status)
			}
			if tt.status == 504 && !strings.Contains(resp.Header.Get("Proxy-Status"), "http_response_timeout") {
				t.Errorf("Proxy-Status %q", resp.Header.Get("Proxy-Status"))
			}
			for i, u := range slow {
				if n := u.Count("GET", "/slow"); n != 1 {
					t.Errorf("slow server %d saw the request %d times, want 1", i, n)
				}
			}
		})
	}
}

// TestHookSeesTheFacts: the facts a hook gets are the wire's: every byte
// written counted, body included, and whether the connection was pooled.
func TestHookSeesTheFacts(t *testing.T) {
	a := upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
		io.ReadFull(body, make([]byte, 30<<10))
		c.Reset()
	})
	b := upstreamtest.Start(t, upstreamtest.Echo())
	h := forceInOrder(withPolicy(&retry.Policy{}), a.Addr(), b.Addr())
	hs := start(t, h)
	body := bytes.Repeat([]byte("x"), 40<<10)
	c := hs.dial(t)
	// The head first, the body a moment later: it goes through the pump.
	head := fmt.Sprintf("PUT /f HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", len(body))
	c.send(head)
	hs.waitRead(t, c.nc)
	c.send(string(body))
	resp, err := readFull(c)
	if err != nil || resp.status != 200 || resp.body != string(body) {
		t.Fatalf("got %d, %d bytes, %v", resp.status, len(resp.body), err)
	}
	facts := h.seen()
	if len(facts) != 1 {
		t.Fatalf("hook asked %d times, want 1", len(facts))
	}
	f := facts[0]
	// A read 30 KiB before it reset: at least that much went out, and
	// never more than the whole request, which B got whole.
	got := b.Requests()[0]
	whole := int64(len(got.RawHead) + len(got.RawBody))
	if f.Wrote < 30<<10 || f.Wrote > whole || f.Method != "PUT" || f.Reused || f.Read != 0 ||
		!f.Replayable || f.SentDownstream || f.Source != fault.Upstream || f.Try != 1 || f.Err.Kind != fault.ConnectionReset {
		t.Fatalf("facts %+v", f)
	}
	// The try that answered wrote the whole request, head and body. Its
	// TryDone comes once its response has gone to the client.
	var wrote []int64
	wait.For(t, "the answering try's TryDone", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		wrote = append(wrote[:0], h.wrote...)
		return len(wrote) == 2
	})
	if wrote[1] != whole {
		t.Fatalf("tries wrote %v, want [..., %d]", wrote, whole)
	}
}
