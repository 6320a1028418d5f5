package proxy

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/retry"
)

// ordered picks its peers in a fixed order, skipping those that already
// failed this request; when all have, it starts over. Tests use it so that
// "A first, then B" is certain.
type ordered struct{ peers []*Peer }

func (h *ordered) UpstreamPeer(s *Session) (*Peer, error) {
	for _, p := range h.peers {
		if !s.Tried(p.Addr) {
			return p, nil
		}
	}
	return h.peers[0], nil
}

func inOrder(opts *PeerOptions, addrs ...string) *ordered {
	h := &ordered{}
	for _, a := range addrs {
		h.peers = append(h.peers, &Peer{Addr: a, Options: opts})
	}
	return h
}

// silent gives the first n peers of h a response-header timeout of d, in
// options of their own: the stimulus of a test of servers that never
// answer. The others keep their options, whose timeouts a loaded machine
// cannot trip, so that a server that answers is never taken for a silent
// one.
func (h *ordered) silent(n int, d time.Duration) {
	for _, p := range h.peers[:n] {
		o := *p.Options
		o.ResponseHeaderTimeout = d
		p.Options = &o
	}
}

func withPolicy(p *retry.Policy) *PeerOptions {
	o := testOptions()
	o.Retry = p
	return o
}

// TestSeed000 replays seed 000: an upstream that answers the first request
// of each connection and closes on the second without answering.
func TestSeed000(t *testing.T) {
	type step struct {
		req    string
		status int
		path   string
		sends  int // how many times the upstream saw this path
	}
	get := func(p string) string { return "GET " + p + " HTTP/1.1\r\nHost: a\r\n\r\n" }
	post := func(p, key string) string {
		k := ""
		if key != "" {
			k = "Idempotency-Key: " + key + "\r\n"
		}
		return "POST " + p + " HTTP/1.1\r\nHost: a\r\n" + k + "Content-Length: 3\r\n\r\nx=1"
	}
	tests := []struct {
		mode  retry.NonIdempotent
		steps []step
	}{
		{retry.Keyed, []step{
			{get("/g1"), 200, "/g1", 1},
			{get("/g2"), 200, "/g2", 2}, // resent on a new connection
			{post("/p1", ""), 502, "/p1", 1},
			{get("/g3"), 200, "/g3", 1}, // opens a connection for the next POST to reuse
			{post("/k1", "k1"), 200, "/k1", 2},
		}},
		{retry.Never, []step{
			{get("/g1"), 200, "/g1", 1},
			{post("/k1", "k1"), 502, "/k1", 1},
		}},
		{retry.Always, []step{
			{get("/g1"), 200, "/g1", 1},
			{post("/p1", ""), 200, "/p1", 2},
		}},
	}
	// The same rules hold for a server on a Unix socket.
	for _, network := range []string{"tcp", "unix"} {
		for _, tt := range tests {
			t.Run(network+"/"+tt.mode.String(), func(t *testing.T) {
				startUp := upstreamtest.Start
				if network == "unix" {
					startUp = upstreamtest.StartUnix
				}
				up := startUp(t, upstreamtest.AnswerFirstThenDrop())
				hs := start(t, inOrder(withPolicy(&retry.Policy{NonIdempotent: tt.mode}), up.Addr()))
				for _, st := range tt.steps {
					resp, _ := hs.do(t, st.req)
					if resp.StatusCode != st.status {
						t.Logf("pool %+v accepts %d", hs.srv.Pool.Stats(), up.Accepts())
						t.Fatalf("%s %s: status %d, want %d", strings.Fields(st.req)[0], st.path, resp.StatusCode, st.status)
					}
					if st.status == 502 && !strings.Contains(resp.Header.Get("Proxy-Status"), "error=connection_terminated") {
						t.Errorf("%s: Proxy-Status %q", st.path, resp.Header.Get("Proxy-Status"))
					}
					if n := up.Count("", st.path); n != st.sends {
						t.Logf("pool %+v accepts %d", hs.srv.Pool.Stats(), up.Accepts())
						t.Fatalf("%s: upstream saw it %d times, want %d", st.path, n, st.sends)
					}
				}
			})
		}
	}
}

// TestSeed002Matrix is nginx's proxy_next_upstream matrix from seed 002:
// upstream A fails in each of eleven ways, B answers 200, under six
// configurations. The expected table is sluice's; where it differs from
// nginx on purpose the comment says so.
func TestSeed002Matrix(t *testing.T) {
	failures := []struct {
		name string
		addr func(t *testing.T) string // A's address
	}{
		{"refused", func(t *testing.T) string { return upstreamtest.Dead(t) }},
		{"silence", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.Silent()).Addr() }},
		{"reset", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.ResetAfterRead()).Addr() }},
		// nginx relays a non-HTTP status line as an HTTP/0.9 body and the
		// client chokes on it; sluice treats it as an invalid response.
		{"garbage status", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.GarbageStatus()).Addr() }},
		{"no colon", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.NoColonHeader()).Addr() }},
		{"500", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.Status(500, "a500")).Addr() }},
		{"502", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.Status(502, "a502")).Addr() }},
		{"503", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.Status(503, "a503")).Addr() }},
		{"504", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.Status(504, "a504")).Addr() }},
		{"404", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.Status(404, "a404")).Addr() }},
		{"truncated", func(t *testing.T) string { return upstreamtest.Start(t, upstreamtest.Truncated()).Addr() }},
	}
	configs := []struct {
		name string
		on   retry.Condition
		off  bool
	}{
		{"default", retry.OnError | retry.OnTimeout, false},
		{"+http_500", retry.OnError | retry.OnTimeout | retry.OnHTTP500, false},
		{"+http_502_503_504", retry.OnError | retry.OnTimeout | retry.OnHTTP502 | retry.OnHTTP503 | retry.OnHTTP504, false},
		{"+invalid_header", retry.OnError | retry.OnTimeout | retry.OnInvalidHeader, false},
		{"+http_404", retry.OnError | retry.OnTimeout | retry.OnHTTP404, false},
		{"off", 0, true},
	}
	// What the client gets: "B" is B's 200; "502!" and "504!" are sluice's
	// own answers (with Proxy-Status); "500" etc. are A's own responses;
	// "cut" is a response whose body ends early with the connection.
	want := map[string][6]string{
		"refused":        {"B", "B", "B", "B", "B", "502!"},
		"silence":        {"B", "B", "B", "B", "B", "504!"},
		"reset":          {"B", "B", "B", "B", "B", "502!"},
		"garbage status": {"502!", "502!", "502!", "B", "502!", "502!"},
		"no colon":       {"502!", "502!", "502!", "B", "502!", "502!"},
		"500":            {"500", "B", "500", "500", "500", "500"},
		"502":            {"502", "502", "B", "502", "502", "502"},
		"503":            {"503", "503", "B", "503", "503", "503"},
		"504":            {"504", "504", "B", "504", "504", "504"},
		"404":            {"404", "404", "404", "404", "B", "404"},
		"truncated":      {"cut", "cut", "cut", "cut", "cut", "cut"},
	}
	for _, f := range failures {
		for ci, cfg := range configs {
			t.Run(f.name+"/"+cfg.name, func(t *testing.T) {
				b := upstreamtest.Start(t, upstreamtest.OK("B"))
				opts := withPolicy(&retry.Policy{On: cfg.on})
				if cfg.off {
					opts.Retry.Tries = 1
				}
				h := inOrder(opts, f.addr(t), b.Addr())
				if f.name == "silence" {
					h.silent(1, 300*time.Millisecond)
				}
				hs := start(t, h)
				got := outcome(t, hs)
				if got != want[f.name][ci] {
					t.Fatalf("client got %s, want %s", got, want[f.name][ci])
				}
				if got != "B" && b.Accepts() != 0 {
					t.Fatalf("B was contacted though the client did not get its answer")
				}
			})
		}
	}
}

// outcome sends one GET and names what the client got.
func outcome(t *testing.T, hs *harness) string {
	t.Helper()
	c := hs.dial(t)
	c.send("GET /m HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := readFull(c)
	if err != nil {
		return "cut"
	}
	switch {
	case resp.status == 200 && resp.body == "B":
		return "B"
	case resp.proxyStatus != "":
		return fmt.Sprintf("%d!", resp.status)
	}
	return fmt.Sprint(resp.status)
}

type fullResponse struct {
	status      int
	proxyStatus string
	body        string
}

// readFull reads a response and its whole body; a body cut short is an
// error.
func readFull(c *client) (fullResponse, error) {
	resp, err := readHTTP(c)
	if err != nil {
		return fullResponse{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fullResponse{}, err
	}
	return fullResponse{resp.StatusCode, resp.Header.Get("Proxy-Status"), string(body)}, nil
}

func TestAllServersFailingCountsTries(t *testing.T) {
	for _, tries := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(tries), func(t *testing.T) {
			var ups []*upstreamtest.Server
			var addrs []string
			for i := 0; i < 3; i++ {
				u := upstreamtest.Start(t, upstreamtest.Status(503, "busy"))
				ups = append(ups, u)
				addrs = append(addrs, u.Addr())
			}
			hs := start(t, inOrder(withPolicy(&retry.Policy{Tries: tries, On: retry.OnError | retry.OnTimeout | retry.OnHTTP503}), addrs...))
			const requests = 10
			for i := 0; i < requests; i++ {
				resp, body := hs.do(t, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
				// The last try's own 503 goes to the client as it came.
				if resp.StatusCode != 503 || body != "busy" || resp.Header.Get("Proxy-Status") != "" {
					t.Fatalf("got %d %q %q", resp.StatusCode, body, resp.Header.Get("Proxy-Status"))
				}
			}
			total := 0
			for _, u := range ups {
				total += len(u.Requests())
			}
			// With three servers, a request tries each at most once
			// before the order starts over.
			if want := requests * tries; total != want {
				t.Fatalf("upstreams saw %d requests, want %d", total, want)
			}
		})
	}
}

func TestPostSilentPastTimeout(t *testing.T) {
	tests := []struct {
		mode   retry.NonIdempotent
		key    bool
		status int
		bSaw   int
	}{
		{retry.Keyed, false, 504, 0},
		{retry.Keyed, true, 200, 1},
		{retry.Always, false, 200, 1},
		{retry.Never, true, 504, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/key=%v", tt.mode, tt.key), func(t *testing.T) {
			a := upstreamtest.Start(t, upstreamtest.Silent())
			b := upstreamtest.Start(t, upstreamtest.OK("B"))
			opts := withPolicy(&retry.Policy{NonIdempotent: tt.mode})
			h := inOrder(opts, a.Addr(), b.Addr())
			h.silent(1, 300*time.Millisecond)
			hs := start(t, h)
			key := ""
			if tt.key {
				key = "Idempotency-Key: order-1\r\n"
			}
			resp, _ := hs.do(t, "POST /order HTTP/1.1\r\nHost: a\r\n"+key+"Content-Length: 2\r\n\r\nhi")
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status == 504 && !strings.Contains(resp.Header.Get("Proxy-Status"), "http_response_timeout") {
				t.Errorf("Proxy-Status %q", resp.Header.Get("Proxy-Status"))
			}
			if n := a.Count("POST", "/order"); n != 1 {
				t.Errorf("A saw the POST %d times", n)
			}
			if n := b.Count("POST", "/order"); n != tt.bSaw {
				t.Errorf("B saw the POST %d times, want %d", n, tt.bSaw)
			}
		})
	}
}

func TestNonIdempotentNeverOnLongIdleConnection(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	opts := testOptions()
	opts.Pool.Once.MaxIdle = 100 * time.Millisecond
	hs := start(t, inOrder(opts, up.Addr()))
	hs.get(t, "/warm") // leaves a pooled connection
	// The stimulus is the idle time itself, past Once.MaxIdle: the pool
	// reads the clock when it hands a connection out, nothing happens
	// when the time passes that a test could wait for, and a real socket
	// cannot run on synctest's clock.
	time.Sleep(200 * time.Millisecond)
	resp, _ := hs.do(t, "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if up.Accepts() != 2 {
		t.Fatalf("the POST went on the connection idle for 200ms (accepts %d)", up.Accepts())
	}
	// A GET still takes the pooled connection.
	hs.get(t, "/g")
	if up.Accepts() != 2 {
		t.Fatalf("the GET dialed anew (accepts %d)", up.Accepts())
	}
}

func TestBodyBufferBoundsReplay(t *testing.T) {
	for _, size := range []int{10 << 10, 100 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			a := upstreamtest.Start(t, upstreamtest.ResetAfterRead())
			b := upstreamtest.Start(t, upstreamtest.Echo())
			hs := start(t, inOrder(withPolicy(&retry.Policy{BodyBuffer: 64 << 10}), a.Addr(), b.Addr()))
			body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
			c := hs.dial(t)
			c.send(fmt.Sprintf("PUT /f HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
			resp, err := readFull(c)
			if size <= 64<<10 {
				if err != nil || resp.status != 200 || resp.body != string(body) {
					t.Fatalf("replayed body: status %d, %d bytes back, err %v", resp.status, len(resp.body), err)
				}
				return
			}
			if err != nil || resp.status != 502 {
				t.Fatalf("status %d err %v, want 502", resp.status, err)
			}
			if b.Accepts() != 0 {
				t.Fatal("a body larger than body_buffer was resent")
			}
			if !strings.Contains(hs.errors.String(), "body_buffer") {
				t.Fatalf("the log does not say why:\n%s", hs.errors)
			}
		})
	}
}

func TestReplayResumesSlowBody(t *testing.T) {
	// A reads the first half of a chunked body and resets; the retry to B
	// resends that half from the buffer, then the client sends the rest.
	a := upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
		io.ReadFull(body, make([]byte, 5))
		c.Reset()
	})
	b := upstreamtest.Start(t, upstreamtest.Echo())
	hs := start(t, inOrder(withPolicy(&retry.Policy{}), a.Addr(), b.Addr()))
	c := hs.dial(t)
	first := "5;ext=1\r\nhello\r\n"
	c.send("PUT /slow HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + first)
	wait.For(t, "A to reset", func() bool { return strings.Contains(hs.errors.String(), "retrying") })
	c.send("6\r\n world\r\n0\r\nX-T: 1\r\n\r\n")
	resp, err := readFull(c)
	if err != nil || resp.status != 200 || resp.body != "hello world" {
		t.Fatalf("got %d %q %v", resp.status, resp.body, err)
	}
	if raw := string(b.Requests()[0].RawBody); raw != first+"6\r\n world\r\n0\r\nX-T: 1\r\n\r\n" {
		t.Fatalf("B got body %q", raw)
	}
}

func TestUpstreamDiesAfterHead(t *testing.T) {
	a := upstreamtest.Start(t, upstreamtest.Truncated())
	b := upstreamtest.Start(t, upstreamtest.OK("B"))
	hs := start(t, inOrder(withPolicy(&retry.Policy{}), a.Addr(), b.Addr()))
	c := hs.dial(t)
	c.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if _, err := readFull(c); err == nil {
		t.Fatal("the client got a complete response from a truncated body")
	}
	if b.Accepts() != 0 {
		t.Fatal("retried after the response had started")
	}
	if !c.closed(2 * time.Second) {
		t.Fatal("client connection not aborted")
	}
}

func TestRetryBudget(t *testing.T) {
	a := upstreamtest.Dead(t)
	b := upstreamtest.Start(t, upstreamtest.OK("B"))
	budget := retry.NewBudget(0, 0.1, nil) // one retry per ten seconds
	hs := start(t, inOrder(withPolicy(&retry.Policy{Budget: budget}), a, b.Addr()))
	if status, _ := hs.get(t, "/1"); status != 200 {
		t.Fatalf("first request: %d (the budget allows one retry)", status)
	}
	resp, _ := hs.do(t, "GET /2 HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.StatusCode != 502 || !strings.Contains(resp.Header.Get("Proxy-Status"), "connection_refused") {
		t.Fatalf("second request: %d %q", resp.StatusCode, resp.Header.Get("Proxy-Status"))
	}
	if budget.Denied() != 1 {
		t.Fatalf("budget denied %d retries, want 1", budget.Denied())
	}
	if !strings.Contains(hs.errors.String(), "retry budget exhausted") {
		t.Fatalf("the log does not say why:\n%s", hs.errors)
	}
}

func TestStaleResendsCountAsTries(t *testing.T) {
	// Every reused connection is dropped; a fresh one answers. A GET on a
	// pooled connection is resent, and the log marks the resend; the
	// sends never exceed tries (nginx was measured sending one GET four
	// times).
	up := upstreamtest.Start(t, upstreamtest.AnswerFirstThenDrop())
	hs := start(t, inOrder(withPolicy(&retry.Policy{Tries: 2}), up.Addr()))
	hs.get(t, "/warm")
	if status, _ := hs.get(t, "/x"); status != 200 {
		t.Fatalf("status %d", status)
	}
	if n := up.Count("GET", "/x"); n != 2 {
		t.Fatalf("upstream saw /x %d times, want 2", n)
	}
	if !strings.Contains(hs.errors.String(), "reused=true") {
		t.Fatalf("no try log:\n%s", hs.errors)
	}
	wait.For(t, "the access log line", func() bool {
		return strings.Contains(hs.access.String(), `upstream_status="connection_closed, 200" reused=false tries=2 stale_resends=1`)
	})
}

func TestConnectFailureRetriesAnyMethod(t *testing.T) {
	a := upstreamtest.Dead(t)
	b := upstreamtest.Start(t, upstreamtest.OK("B"))
	hs := start(t, inOrder(withPolicy(&retry.Policy{NonIdempotent: retry.Never}), a, b.Addr()))
	resp, body := hs.do(t, "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
	if resp.StatusCode != 200 || body != "B" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

// TestPostsLearnWhichServersKeepConnections: under pool.Learn, a POST
// without a key dials until its server has completed pool.TrustAfter
// exchanges without dropping a connection, and then takes pooled ones.
func TestPostsLearnWhichServersKeepConnections(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	opts := testOptions()
	opts.Pool.Once = pool.Once{Mode: pool.Learn}
	hs := start(t, inOrder(opts, up.Addr()))
	post := "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx"
	c := hs.dial(t)
	c.roundTrip("GET /warm HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, _ := c.roundTrip(post); resp.StatusCode != 200 || up.Accepts() != 2 {
		t.Fatalf("first POST: %d, %d connections; want a new one for it", resp.StatusCode, up.Accepts())
	}
	for i := 0; i < pool.TrustAfter; i++ {
		c.roundTrip("GET /g HTTP/1.1\r\nHost: a\r\n\r\n")
	}
	accepts := up.Accepts()
	if resp, _ := c.roundTrip(post); resp.StatusCode != 200 || up.Accepts() != accepts {
		t.Fatalf("POST after %d clean exchanges: %d, connections %d -> %d; want a pooled one",
			pool.TrustAfter, resp.StatusCode, accepts, up.Accepts())
	}
	if s := hs.srv.Pool.Stats(); s.Untrusted != 1 {
		t.Fatalf("untrusted %d, want 1", s.Untrusted)
	}
}
