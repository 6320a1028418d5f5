package balance

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// checkTarget is a tiny raw HTTP/1.1 server for health checks: it reads one
// request head per connection, answers with the current response (or
// closes at once when that is empty) and closes. It records every request.
type checkTarget struct {
	ln       net.Listener
	response atomic.Value // string
	conns    atomic.Int64

	mu       sync.Mutex
	requests []string
	wg       sync.WaitGroup
}

func newCheckTarget(t *testing.T, response string) *checkTarget {
	t.Helper()
	return newCheckTargetTLS(t, response, nil)
}

// newCheckTargetTLS is newCheckTarget speaking TLS under cfg (nil: plain
// TCP).
func newCheckTargetTLS(t *testing.T, response string, cfg *tls.Config) *checkTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	return serveCheckTarget(t, response, ln)
}

// serveCheckTarget is newCheckTarget on a listener of the caller's.
func serveCheckTarget(t *testing.T, response string, ln net.Listener) *checkTarget {
	ct := &checkTarget{ln: ln}
	ct.response.Store(response)
	ct.wg.Add(1)
	go ct.serve()
	t.Cleanup(func() {
		ln.Close()
		ct.wg.Wait()
	})
	return ct
}

func (ct *checkTarget) serve() {
	defer ct.wg.Done()
	for {
		c, err := ct.ln.Accept()
		if err != nil {
			return
		}
		ct.conns.Add(1)
		ct.wg.Add(1)
		go func() {
			defer ct.wg.Done()
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			resp := ct.response.Load().(string)
			if resp == "" {
				return
			}
			br := bufio.NewReader(c)
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				head.WriteString(line)
				if err != nil || line == "\r\n" {
					break
				}
			}
			io.WriteString(c, resp)
			// Whatever comes after the head, until the checker closes, would
			// be a second request on the connection: record it too.
			rest, _ := io.ReadAll(br)
			ct.mu.Lock()
			ct.requests = append(ct.requests, head.String()+string(rest))
			ct.mu.Unlock()
		}()
	}
}

func (ct *checkTarget) addr() string {
	if a, ok := ct.ln.Addr().(*net.UnixAddr); ok {
		return "unix:" + a.Name
	}
	return ct.ln.Addr().String()
}

func (ct *checkTarget) requestsSeen() []string {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return append([]string(nil), ct.requests...)
}

const (
	ok200   = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	err500  = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"
	chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nstatu\r\n4\r\ns:gr\r\n4\r\neen!\r\n0\r\n\r\n"
)

// failedChecks matches the State of a server out after at least 3 failed
// checks (checks go on while a test reads the state) for reason, a regular
// expression; an empty reason matches any.
func failedChecks(reason string) *regexp.Regexp {
	if reason == "" {
		reason = ".*"
	}
	return regexp.MustCompile(`^unhealthy \(active: ([3-9]|\d\d+) failed checks: ` + reason + `\)$`)
}

// fastChecks are active checks quick enough for tests.
func fastChecks() *ActiveCheck {
	return &ActiveCheck{Path: "/healthz", Interval: 20 * time.Millisecond, Timeout: time.Second, Rise: 2, Fall: 3}
}

func TestActiveHTTPCheckFallAndRise(t *testing.T) {
	ct := newCheckTarget(t, ok200)
	var rec recorder
	o := testOptions(newClock())
	o.Active = fastChecks()
	o.OnChange = rec.OnChange
	g := NewGroup("u", []*Server{{Addr: ct.addr()}}, nil, o)
	g.Start(context.Background())
	t.Cleanup(g.Close)
	s := g.Servers()[0]

	wait.For(t, "a few passed checks", func() bool { return ct.conns.Load() >= 3 })
	if !s.Healthy() {
		t.Fatalf("unhealthy while passing: %s", s.State())
	}
	ct.response.Store(err500)
	wait.For(t, "the server to be taken out", func() bool { return !s.Healthy() })
	if st := s.State(); !failedChecks("status 500").MatchString(st) {
		t.Fatalf("State = %q", st)
	}
	ct.response.Store(ok200)
	wait.For(t, "the server to come back", func() bool { return s.Healthy() })
	g.Close()
	if got, want := rec.String(), ct.addr()+"=false "+ct.addr()+"=true"; got != want {
		t.Fatalf("OnChange calls %q, want %q", got, want)
	}

	// Every check came on a connection of its own, said so, and was alone
	// on it.
	reqs := ct.requestsSeen()
	if int64(len(reqs)) > ct.conns.Load() {
		t.Fatalf("%d requests on %d connections", len(reqs), ct.conns.Load())
	}
	for _, r := range reqs {
		want := "GET /healthz HTTP/1.1\r\nHost: " + ct.addr() + "\r\nConnection: close\r\nUser-Agent: sluice-health-check\r\n\r\n"
		if r != want {
			t.Fatalf("check request %q, want %q", r, want)
		}
	}
}

func TestActiveHTTPCheckVerdicts(t *testing.T) {
	tests := []struct {
		name     string
		response string
		check    func(*ActiveCheck)
		healthy  bool
		state    string // "healthy", or the reason of the failed checks
	}{
		{"200", ok200, nil, true, "healthy"},
		{"500", err500, nil, false, "status 500"},
		{"500 expected", err500, func(a *ActiveCheck) { a.Expect = []int{200, 500} }, true, "healthy"},
		{"closes without answering", "", nil, false, ""}, // EOF or a reset
		{"garbage", "HTTP/9.9 200 OK\r\n\r\n", nil, false, ""},
		{"body contains", chunked, func(a *ActiveCheck) { a.BodyContains = "status:green" }, true, "healthy"},
		{"body lacks", chunked, func(a *ActiveCheck) { a.BodyContains = "status:red" }, false,
			"body does not contain the expected text"},
		{"path with CRLF is refused", ok200, func(a *ActiveCheck) { a.Path = "/x HTTP/1.1\r\nX-Evil: 1\r\n\r\nGET /" }, false,
			"the check's method, path or host cannot go into a request"},
		{"interim response first", "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" + ok200, nil, true, "healthy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct := newCheckTarget(t, tt.response)
			o := testOptions(newClock())
			o.Active = fastChecks()
			if tt.check != nil {
				tt.check(o.Active)
			}
			g := NewGroup("u", []*Server{{Addr: ct.addr()}}, nil, o)
			g.Start(context.Background())
			defer g.Close()
			s := g.Servers()[0]
			if tt.healthy {
				wait.For(t, "checks to run", func() bool { return ct.conns.Load() >= 5 })
			} else {
				wait.For(t, "the server to be taken out", func() bool { return !s.Healthy() })
			}
			st := s.State()
			if s.Healthy() != tt.healthy || (tt.healthy && st != tt.state) || (!tt.healthy && !failedChecks(tt.state).MatchString(st)) {
				t.Fatalf("healthy = %v, State = %q; want %v, %q", s.Healthy(), s.State(), tt.healthy, tt.state)
			}
		})
	}
}

// TestActiveTLSCheck: with ActiveCheck.TLS, HTTP checks verify the
// server's certificate against the server's configured name, and a server
// whose certificate does not verify fails them.
func TestActiveTLSCheck(t *testing.T) {
	ca := tlstest.NewCA(t, "check CA")
	other := tlstest.NewCA(t, "other CA")
	tests := []struct {
		name    string
		cert    tls.Certificate
		check   *tls.Config
		healthy bool
		reason  string
	}{
		{"verified against the server's name", *ca.Server(t, "up.test").TLS, &tls.Config{RootCAs: ca.Pool()}, true, ""},
		{"unknown authority", *other.Server(t, "up.test").TLS, &tls.Config{RootCAs: ca.Pool()}, false, ".*certificate signed by unknown authority"},
		{"plain HTTP to a TLS server", *ca.Server(t, "up.test").TLS, nil, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct := newCheckTargetTLS(t, ok200, &tls.Config{Certificates: []tls.Certificate{tt.cert}})
			o := testOptions(newClock())
			o.Active = fastChecks()
			o.Active.TLS = tt.check
			_, port, _ := net.SplitHostPort(ct.addr())
			g := NewGroup("u", []*Server{{Addr: ct.addr(), Name: "up.test:" + port}}, nil, o)
			g.Start(context.Background())
			defer g.Close()
			s := g.Servers()[0]
			if tt.healthy {
				wait.For(t, "checks to pass", func() bool { return len(ct.requestsSeen()) >= 3 })
			} else {
				wait.For(t, "the server to be taken out", func() bool { return !s.Healthy() })
			}
			if s.Healthy() != tt.healthy || !tt.healthy && !failedChecks(tt.reason).MatchString(s.State()) {
				t.Fatalf("healthy = %v, State = %q; want %v, ...%s", s.Healthy(), s.State(), tt.healthy, tt.reason)
			}
		})
	}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestActiveTCPCheck(t *testing.T) {
	live := newCheckTarget(t, "") // accepts and closes
	dead := deadAddr(t)
	o := testOptions(newClock())
	o.Active = fastChecks()
	o.Active.TCP = true
	g := NewGroup("u", []*Server{{Addr: live.addr()}, {Addr: dead}}, nil, o)
	g.Start(context.Background())
	defer g.Close()
	ss := g.Servers()
	wait.For(t, "the dead server to be taken out", func() bool { return !ss[1].Healthy() })
	wait.For(t, "the live server to be checked a few times", func() bool { return live.conns.Load() >= 4 })
	if !ss[0].Healthy() {
		t.Fatalf("live server: %s", ss[0].State())
	}
	if st := ss[1].State(); !failedChecks("dial tcp .*refused").MatchString(st) {
		t.Fatalf("dead server: %s", st)
	}
	// The live server gets every pick.
	for range 20 {
		s, _ := g.Pick(Request{})
		if s != ss[0] {
			t.Fatalf("picked %s", s)
		}
		g.Report(s, Result{Status: 200})
	}
}

func TestCloseStopsEverything(t *testing.T) {
	ct := newCheckTarget(t, ok200)
	var lookups atomic.Int64
	o := testOptions(newClock())
	o.Active = fastChecks()
	o.Resolver = func(ctx context.Context, host string) ([]netip.Addr, error) {
		lookups.Add(1)
		return loopback(1, 2), nil
	}
	g := NewGroup("u", []*Server{
		{Addr: ct.addr()},
		{Name: "app.internal:9", ResolveInterval: 10 * time.Millisecond},
	}, nil, o)
	g.Start(context.Background())
	wait.For(t, "lookups and checks", func() bool { return lookups.Load() >= 2 && ct.conns.Load() >= 2 })
	if n, _ := goroutinesOf(); n == 0 {
		t.Fatal("no background goroutines found while running")
	}
	g.Close()
	g.Close() // twice is fine
	// Close waited for them; the last ones may still be leaving their
	// frames after signalling. (That the lookups stop, on a fake clock:
	// TestDNSSchedule.)
	wait.For(t, "the group's goroutines to end", func() bool { n, _ := goroutinesOf(); return n == 0 })
	g.Start(context.Background()) // after Close: nothing
	if n, stacks := goroutinesOf(); n != 0 {
		t.Fatalf("Start after Close started goroutines:\n%s", stacks)
	}
}
