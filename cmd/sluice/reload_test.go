//go:build unix

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/h2"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// started is a sluice run started in this process, with its config file
// and log.
type started struct {
	*running
	path string
	log  *proxytest.Buffer
}

// startRunning writes body as the config file and starts serving it as sluice
// run does (without the signal loop: the test calls reload); the cleanup
// stops it.
func startRunning(t *testing.T, body string) *started {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	log := &proxytest.Buffer{}
	r, err := start(path, cfg, loaded{}, log, newLog(log, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.stop(false) })
	return &started{running: r, path: path, log: log}
}

// reloadWith writes body as the config file and reloads it.
func (s *started) reloadWith(t *testing.T, body string) {
	t.Helper()
	if err := os.WriteFile(s.path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s.reload()
}

// addr returns the address listener i is bound to.
func (s *started) addr(i int) string { return s.sockets[i].ln.Addr().String() }

const upstreamsOf = "routes: [{upstream: app}]\nupstreams:\n  app:\n    servers: [{address: %s}]\n"

// A reload swaps routes and upstreams while the server keeps serving, and
// a broken file leaves the running configuration alone.
func TestReload(t *testing.T) {
	a := upstreamtest.Start(t, upstreamtest.OK("a"))
	b := upstreamtest.Start(t, upstreamtest.OK("b"))
	conf := func(upstream string) string {
		return "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\n" + fmt.Sprintf(upstreamsOf, upstream)
	}
	s := startRunning(t, conf(a.Addr()))
	srv := s.srv
	get := func() string {
		_, body := proxytest.Get(t, s.addr(0), "/", "")
		return body
	}
	if got := get(); got != "a" {
		t.Fatalf("before reload: %q", got)
	}
	s.reloadWith(t, conf(b.Addr()))
	if got := get(); got != "b" {
		t.Fatalf("after reload: %q", got)
	}
	if s.srv != srv {
		t.Error("a reload of routes and upstreams started a new server")
	}
	s.reloadWith(t, "listen: [{address: 127.0.0.1:0}]\nroutes: [{upstream: nowhere}]\n")
	if got := get(); got != "b" {
		t.Fatalf("after a broken reload: %q", got)
	}
	if !strings.Contains(s.log.String(), "reload failed; still serving the previous configuration") {
		t.Errorf("the broken reload is not logged:\n%s", s.log.String())
	}
}

// limits.max_idle_upstream_conns is applied by a reload, to the pool every
// server shares and without a new server: lowered, it closes the idle
// connections beyond it at once; no restart is asked for.
func TestReloadPoolBound(t *testing.T) {
	var ups []string
	for range 3 {
		ups = append(ups, upstreamtest.Start(t, upstreamtest.OK("ok")).Addr())
	}
	conf := func(bound int) string {
		return fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nlimits: {max_idle_upstream_conns: %d}\n", bound) +
			"routes:\n  - {path_prefix: /0, upstream: u0}\n  - {path_prefix: /1, upstream: u1}\n  - {path_prefix: /2, upstream: u2}\n" +
			fmt.Sprintf("upstreams:\n  u0: {servers: [{address: %s}]}\n  u1: {servers: [{address: %s}]}\n  u2: {servers: [{address: %s}]}\n", ups[0], ups[1], ups[2])
	}
	s := startRunning(t, conf(10))
	srv := s.srv
	for i := range 3 {
		if code, _ := proxytest.Get(t, s.addr(0), fmt.Sprintf("/%d", i), ""); code != 200 {
			t.Fatalf("GET /%d: %d", i, code)
		}
	}
	// A connection goes back to the pool as its request ends, just after
	// the answer.
	wait.For(t, "3 idle upstream connections before the reload", func() bool { return s.pool.Stats().Idle == 3 })
	s.reloadWith(t, conf(1))
	if s.srv != srv {
		t.Error("a reload of max_idle_upstream_conns alone started a new server")
	}
	if idle := s.pool.Stats().Idle; idle != 1 {
		t.Errorf("%d idle upstream connections after lowering the bound to 1, want 1", idle)
	}
	for i := range 3 {
		if code, _ := proxytest.Get(t, s.addr(0), fmt.Sprintf("/%d", i), ""); code != 200 {
			t.Fatalf("after the reload, GET /%d: %d", i, code)
		}
	}
	// Each of the three connections, dialed anew, went back to the pool
	// and pushed out the one idle before it: 2 evictions at the reload,
	// 3 since. Then exactly one is idle.
	wait.For(t, "the three connections back in the pool", func() bool { return s.pool.Stats().Evicted == 5 })
	if idle := s.pool.Stats().Idle; idle != 1 {
		t.Errorf("%d idle upstream connections under a bound of 1, want 1", idle)
	}
}

// A reload turns the admin listener on (ready, and counting the tries
// from then on) and off again, with no restart; an address that cannot be
// bound fails the reload, which then changes nothing.
func TestReloadAdminOnOff(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	base := "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\n" + fmt.Sprintf(upstreamsOf, up.Addr())
	s := startRunning(t, base)
	adminAddr := freeAddr(t)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + adminAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/live"); code != 0 {
		t.Fatalf("an admin listener before it was configured: %d", code)
	}

	s.reloadWith(t, base+"admin: {address: "+adminAddr+"}\n")
	if code, body := get("/ready"); code != 200 {
		t.Fatalf("admin turned on by a reload: /ready %d %s", code, body)
	}
	if code, _ := proxytest.Get(t, s.addr(0), "/", ""); code != 200 {
		t.Fatalf("GET through the proxy: %d", code)
	}
	// The try is counted as its request ends, just after the answer.
	wait.For(t, "the try counted on the status API", func() bool {
		code, body := get("/api/upstreams")
		return code == 200 && strings.Contains(body, `"tries": 1,`)
	})

	// Taken: the reload fails, the listener stays.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	s.reloadWith(t, base+"admin: {address: "+taken.Addr().String()+"}\n")
	if code, _ := get("/live"); code != 200 {
		t.Errorf("after a move to a taken address, the admin listener is gone: %d", code)
	}

	s.reloadWith(t, base)
	if code, _ := get("/live"); code != 0 {
		t.Errorf("admin turned off by a reload, still answers: %d", code)
	}
	if !strings.Contains(s.log.String(), "admin listener closed") {
		t.Errorf("turning admin off is not logged:\n%s", s.log.String())
	}
	// Off, then on at an address taken: the reload fails, nothing changes.
	s.reloadWith(t, base+"admin: {address: "+taken.Addr().String()+"}\n")
	if !strings.Contains(s.log.String(), "reload failed; still serving the previous configuration") {
		t.Errorf("turning admin on at a taken address did not fail the reload:\n%s", s.log.String())
	}
	if s.admin != nil {
		t.Error("a failed reload left an admin server")
	}
}

// A reload that starts a new server keeps the HTTP/2 connection to an h2c
// upstream: the new server's requests go on it, nothing is dialed again.
func TestReloadKeepsH2UpstreamConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	var live sync.WaitGroup
	var mu sync.Mutex
	var conns []*h2.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		live.Wait()
	})
	live.Add(1)
	go func() {
		defer live.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c := h2.NewConn(nc, nil, nil, func(st *h2.Stream) {
				st.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, false)
				io.WriteString(st, "h2")
				st.End()
			})
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			live.Add(1)
			go func() { defer live.Done(); c.Serve() }()
		}
	}()
	conf := func(header string) string {
		return "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\ntimeouts: {header: " + header + "}\n" +
			"routes: [{upstream: app}]\nupstreams:\n  app:\n    protocol: h2c\n    servers: [{address: " + ln.Addr().String() + "}]\n"
	}
	s := startRunning(t, conf("10s"))
	srv := s.srv
	if code, body := proxytest.Get(t, s.addr(0), "/", ""); code != 200 || body != "h2" {
		t.Fatalf("before the reload: %d %q", code, body)
	}
	s.reloadWith(t, conf("20s"))
	if s.srv == srv {
		t.Fatal("a reload of timeouts.header did not start a new server")
	}
	if code, body := proxytest.Get(t, s.addr(0), "/", ""); code != 200 || body != "h2" {
		t.Fatalf("after the reload: %d %q", code, body)
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("%d upstream connections, want the one from before the reload", n)
	}
}

// holdUpstream answers /hold/... once release is closed, and anything
// else at once; held counts the requests waiting.
func holdUpstream(t *testing.T) (u *upstreamtest.Server, release chan struct{}) {
	release = make(chan struct{})
	u = upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if strings.HasPrefix(r.Target, "/hold/") {
			select {
			case <-release:
			case <-c.Done():
				return
			}
		}
		c.Respond(200, "ok "+r.Target)
	})
	return u, release
}

// inFlight sends GET path on a new connection to addr and returns a
// channel that gets the response's status, body and whether it closes, or
// the error.
func inFlight(t *testing.T, addr, path string) <-chan string {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path)
	got := make(chan string, 1)
	go func() {
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err != nil {
			got <- err.Error()
			return
		}
		body, _ := io.ReadAll(resp.Body)
		got <- fmt.Sprintf("%d %s close=%v", resp.StatusCode, body, resp.Close)
	}()
	return got
}

// A reload adds a listener and removes one: the listener that stays keeps
// its socket (and never refuses a client), a request in flight on the old
// server finishes, one in flight on a removed listener too, and the
// removed listener's address refuses clients afterwards.
func TestReloadListeners(t *testing.T) {
	up, release := holdUpstream(t)
	rest := "access_log: {enabled: false}\n" + fmt.Sprintf(upstreamsOf, up.Addr())
	one := "listen: [{address: 127.0.0.1:0}]\n" + rest
	two := "listen: [{address: 127.0.0.1:0}, {address: 127.0.0.1:0, protocols: [h2c, http/1.1]}]\n" + rest
	s := startRunning(t, one)
	first, ln := s.addr(0), s.sockets[0].ln
	oldSrv := s.srv

	held := inFlight(t, first, "/hold/1")
	wait.For(t, "the held request at the upstream", func() bool { return up.Count("GET", "/hold/1") == 1 })
	s.reloadWith(t, two)
	if s.srv == oldSrv {
		t.Fatal("a new listener did not start a new server")
	}
	if len(s.sockets) != 2 || s.sockets[0].ln != ln || s.addr(0) != first {
		t.Fatalf("the listener that stays changed socket: %v", s.sockets)
	}
	second := s.addr(1)
	for _, a := range []string{first, second} {
		if code, body := proxytest.Get(t, a, "/x", ""); code != 200 || body != "ok /x" {
			t.Fatalf("GET %s after adding a listener: %d %q", a, code, body)
		}
	}
	held2 := inFlight(t, second, "/hold/2")
	wait.For(t, "the request held on the second listener", func() bool { return up.Count("GET", "/hold/2") == 1 })

	s.reloadWith(t, one)
	if len(s.sockets) != 1 || s.sockets[0].ln != ln {
		t.Fatalf("after removing a listener: %v", s.sockets)
	}
	if nc, err := net.Dial("tcp", second); err == nil {
		nc.Close()
		t.Errorf("the removed listener %s still accepts", second)
	}
	if code, _ := proxytest.Get(t, first, "/x", ""); code != 200 {
		t.Fatalf("GET after removing a listener: %d", code)
	}
	close(release)
	// Both requests were in flight on servers that drain: answered, and
	// their connections closed.
	for i, ch := range []<-chan string{held, held2} {
		if got, want := <-ch, fmt.Sprintf("200 ok /hold/%d close=true", i+1); got != want {
			t.Errorf("held request %d: %q, want %q", i+1, got, want)
		}
	}
}

// A listener that cannot be bound (its address taken) fails the reload,
// which changes nothing.
func TestReloadBindFails(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	rest := "access_log: {enabled: false}\n" + fmt.Sprintf(upstreamsOf, up.Addr())
	s := startRunning(t, "listen: [{address: 127.0.0.1:0}]\n"+rest)
	srv, addr := s.srv, s.addr(0)
	s.reloadWith(t, fmt.Sprintf("listen: [{address: 127.0.0.1:0}, {address: %s}]\ntimeouts: {header: 3s}\n", taken.Addr())+rest)
	if s.srv != srv || len(s.sockets) != 1 || s.cfg.Timeouts.Header == 3*time.Second {
		t.Fatal("a reload that could not bind changed the server")
	}
	if !strings.Contains(s.log.String(), "reload failed; still serving the previous configuration") ||
		!strings.Contains(s.log.String(), "address already in use") {
		t.Errorf("the failed reload is not logged with why:\n%s", s.log.String())
	}
	if code, _ := proxytest.Get(t, addr, "/", ""); code != 200 {
		t.Fatalf("after the failed reload: %d", code)
	}
}

// Each key the server holds changes on reload: limits, client timeouts,
// forwarding fields, the access log (path and format), the log (level and
// format), and the metrics endpoint's address.
func TestReloadServerKeys(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	log1, log2 := filepath.Join(dir, "access1.log"), filepath.Join(dir, "access2.log")
	before := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\naccess_log: {path: %s, buffer: 0}\nlog: {level: info, format: text}\n"+
		"metrics: {address: 127.0.0.1:0}\ntimeouts: {header: 1h}\n", log1) + fmt.Sprintf(upstreamsOf, up.Addr())
	after := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\naccess_log: {path: %s, buffer: 0, format: json}\nlog: {level: debug, format: json}\n"+
		"metrics: {address: 127.0.0.1:0}\ntimeouts: {header: 200ms}\nlimits: {max_headers: 3}\nforwarded: {via: false}\n", log2) + fmt.Sprintf(upstreamsOf, up.Addr())
	s := startRunning(t, before)
	addr := s.addr(0)
	metricsAddr := s.metricsLn.Addr().String()
	fields := "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n"

	if code, _ := proxytest.Get(t, addr, "/before", fields); code != 200 {
		t.Fatalf("before: %d", code)
	}
	if via := up.Requests()[0].Get("Via"); via == "" {
		t.Fatal("before: no Via")
	}
	s.reloadWith(t, after)
	// Metrics: the address in the file is 127.0.0.1:0 both times: the
	// endpoint stays where it is.
	if got := s.metricsLn.Addr().String(); got != metricsAddr {
		t.Errorf("metrics moved from %s to %s with the same address in the file", metricsAddr, got)
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	if code, _ := proxytest.Get(t, addr, "/after", fields); code != 431 {
		t.Errorf("limits.max_headers 3 after reload: %d, want 431", code)
	}
	if code, _ := proxytest.Get(t, addr, "/after", ""); code != 200 {
		t.Fatalf("after: %d", code)
	}
	reqs := up.Requests()
	if via := reqs[len(reqs)-1].Get("Via"); via != "" {
		t.Errorf("forwarded.via false after reload, still sent: %q", via)
	}
	// timeouts.header 200ms: a head that never ends is answered 408.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	io.WriteString(nc, "GET / HTTP/1.1\r\nHost: test\r\n")
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if line, _ := bufio.NewReader(nc).ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 408") {
		t.Errorf("a head cut short after timeouts.header 200ms: %q, want 408", line)
	}
	// Access log: the old file has the first request, as text; the new
	// one the later ones, as JSON. (buffer: 0 writes each line at once;
	// the old server's log is closed once it has drained.)
	wait.For(t, "the access log lines", func() bool {
		b1, _ := os.ReadFile(log1)
		b2, _ := os.ReadFile(log2)
		return strings.Contains(string(b1), "target=/before") && strings.Contains(string(b2), `"target":"/after"`)
	})
	if b1, _ := os.ReadFile(log1); strings.Contains(string(b1), "/after") {
		t.Errorf("the old access log got a request after the reload: %s", b1)
	}
	// Log: the reload's own line is JSON already.
	if !strings.Contains(s.log.String(), `"msg":"reloaded"`) {
		t.Errorf("log.format json after reload, yet:\n%s", s.log.String())
	}

	// A new metrics address moves the endpoint; the old one closes.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	newMetrics := free.Addr().String()
	free.Close()
	s.reloadWith(t, strings.Replace(after, "metrics: {address: 127.0.0.1:0}", "metrics: {address: "+newMetrics+"}", 1))
	resp, err = http.Get("http://" + newMetrics + "/metrics")
	if err != nil {
		t.Fatalf("metrics at the new address: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "sluice_requests_total") {
		t.Errorf("metrics at the new address: %.200s", body)
	}
	if nc, err := net.Dial("tcp", metricsAddr); err == nil {
		nc.Close()
		t.Errorf("the old metrics address %s still accepts", metricsAddr)
	}
}

// TestReloadAccessLogFormat: a reload changes the access log's format of
// fields, from one to another and to a named one; a format with an
// unknown field fails the reload, which keeps the one running.
func TestReloadAccessLogFormat(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	path := filepath.Join(t.TempDir(), "access.log")
	conf := func(format string) string {
		return fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\naccess_log: {path: %s, buffer: 0, format: '%s'}\n", path, format) +
			fmt.Sprintf(upstreamsOf, up.Addr())
	}
	s := startRunning(t, conf("$method $target $status"))
	addr := s.addr(0)
	lines := func(n int) []string {
		t.Helper()
		var got []string
		wait.For(t, fmt.Sprintf("%d access log lines", n), func() bool {
			b, _ := os.ReadFile(path)
			got = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			return len(got) >= n && strings.HasSuffix(string(b), "\n")
		})
		return got
	}
	n := 0
	get := func(target string) {
		t.Helper()
		if code, _ := proxytest.Get(t, addr, target, "User-Agent: t/1\r\n"); code != 200 {
			t.Fatalf("%s: %d", target, code)
		}
		n++
		lines(n) // written once the answer went out: waited for, so that the lines keep their order
	}
	get("/one")
	s.reloadWith(t, conf("$status $request_uri $upstream_addr"))
	get("/two")
	s.reloadWith(t, conf("$nosuch $status"))
	if !strings.Contains(s.log.String(), "unknown field $nosuch") {
		t.Errorf("the failed reload does not name the unknown field:\n%s", s.log)
	}
	get("/three")
	s.reloadWith(t, conf("combined"))
	get("/four")
	got := lines(4)
	want := []*regexp.Regexp{
		regexp.MustCompile(`^GET /one 200$`),
		regexp.MustCompile(`^200 /two ` + regexp.QuoteMeta(up.Addr()) + `$`),
		regexp.MustCompile(`^200 /three ` + regexp.QuoteMeta(up.Addr()) + `$`),
		regexp.MustCompile(`^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [-+]\d{4}\] "GET /four HTTP/1\.1" 200 \d+ "-" "t/1"$`),
	}
	if len(got) != len(want) {
		t.Fatalf("access log:\n%s\nwant %d lines", strings.Join(got, "\n"), len(want))
	}
	for i, re := range want {
		if !re.MatchString(got[i]) {
			t.Errorf("line %d %q, want it to match %s", i+1, got[i], re)
		}
	}
}
