package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"go.uber.org/goleak"
)

// The environment that makes this test binary a sluice run child (see
// TestMain): its RLIMIT_NOFILE soft limit, and its config file.
const (
	childNofile = "SLUICE_TEST_CHILD_NOFILE"
	childConfig = "SLUICE_TEST_CHILD_CONFIG"
)

// TestMain runs sluice run instead of the tests when the test binary is
// started as TestRunOutOfDescriptors's child: with its soft limit on open
// files lowered first, as `ulimit -Sn` would (the limit is the process's,
// so the shortage cannot be made inside the test process).
//
// Otherwise it runs the tests and fails them when one leaves a goroutine
// behind, but for those that libraries keep by design: package h2's
// stream-handler pool (h2/workers.go), one for the process, whose idle
// goroutines (in workers.(*Pool).run, their reaper in reap) end on their
// own 5 to 7.5 s after their last stream, and which no Server owns; and
// certmagic's lock keeper (keepLockfileFresh, asleep in time.Sleep), which
// notices a lock's release only at its next 5 s tick, and the rate limiter
// it keeps for each CA and account for the life of the process
// ((*RingBufferRateLimiter).loop). The last two are not on top of their
// stacks, so they are matched anywhere in them.
func TestMain(m *testing.M) {
	if n := os.Getenv(childNofile); n != "" {
		os.Exit(runChild(n, os.Getenv(childConfig)))
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/sluice-proxy/sluice/internal/workers.(*Pool[...]).run"),
		goleak.IgnoreTopFunction("github.com/sluice-proxy/sluice/internal/workers.(*Pool[...]).reap"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).loop"))
}

func runChild(nofile, config string) int {
	n, err := strconv.ParseUint(nofile, 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	l.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return run([]string{"run", "-c", config}, os.Stdout, os.Stderr)
}

// TestRunOutOfDescriptors runs sluice run with 64 descriptors in front of
// three healthy upstreams, and fills them with requests the upstreams hold:
// a client connection and an upstream connection each. Then, one step at a
// time, so that every outcome is known:
//
//   - a client that arrives when no descriptor is left is answered 503
//     proxy_internal_error by the accept loop, with its spare descriptor,
//     once the shortage has lasted 100 ms;
//   - a client accepted on the last descriptor finds none for its upstream
//     connection: 503 proxy_internal_error after one try, not retried;
//   - no server is marked down for it (passive health here takes a server
//     out on its first failure, so one failure counted would show);
//
// then sends 150 clients at once, which get 200 or one of those 503s and
// nothing else; and once the load is gone, requests succeed again. The
// metrics count what the clients were told.
func TestRunOutOfDescriptors(t *testing.T) {
	const limit = 64
	gate := make(chan struct{})    // closed: every held request is answered
	one := make(chan struct{}, 16) // a token: one held request is answered, its connection closed
	hold := func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		switch {
		case strings.HasPrefix(r.Target, "/hold/"):
			select {
			case <-one:
				c.Respond(200, "held", upstreamtest.Field{Name: "Connection", Value: "close"})
				c.Close()
				return
			case <-gate:
			case <-c.Done():
				return
			}
		case strings.HasPrefix(r.Target, "/burst/"):
			select {
			case <-time.After(100 * time.Millisecond):
			case <-c.Done():
				return
			}
		}
		c.Respond(200, "ok")
	}
	var ups []*upstreamtest.Server
	var servers []string
	for range 3 {
		u := upstreamtest.Start(t, hold)
		ups = append(ups, u)
		servers = append(servers, "{address: "+u.Addr()+"}")
	}
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	reached := func(path string) int {
		n := 0
		for _, u := range ups {
			n += u.Count("GET", path)
		}
		return n
	}

	sl := startChild(t, limit, fmt.Sprintf(`listen: [{address: 127.0.0.1:0}]
access_log: {enabled: false}
log: {level: info, format: json}
metrics: {address: 127.0.0.1:0}
routes: [{upstream: app}]
upstreams:
  app:
    servers: [%s]
    health: {passive: {max_fails: 1, fail_timeout: 60s, consecutive_failures: 1, max_ejected_percent: 100}}
`, strings.Join(servers, ", ")))

	const (
		shedStatus = `sluice; error=proxy_internal_error; details="out of file descriptors"`
		tryStatus  = `sluice; error=proxy_internal_error; details="1 try: local_resources_exhausted"`
	)
	var (
		held    []*fdClient // waiting at an upstream
		kept    []*fdClient // answered 503 after a try; sluice keeps the connection
		replies []reply     // every answer the clients got
		tried   int         // 503 after a try
		shed    int         // 503 at accept
		ok      int         // 200
	)
	note := func(r reply) {
		replies = append(replies, r)
		switch {
		case r.status == 503 && r.proxyStatus == shedStatus:
			shed++
		case r.status == 503 && r.proxyStatus == tryStatus:
			tried++
		case r.status == 200:
			ok++
		default:
			t.Errorf("%s: %d %q, Proxy-Status %q, %v; want 200 or 503 proxy_internal_error",
				r.path, r.status, r.body, r.proxyStatus, r.err)
		}
	}

	// Fill: a client at a time, each held at an upstream, until one is
	// answered instead, for want of a descriptor.
	for i := 0; ; i++ {
		if i == 4*limit {
			t.Fatalf("%d requests held with %d descriptors, and no 503:\n%s", len(held), limit, sl.out.String())
		}
		path := fmt.Sprintf("/hold/%d", i)
		c := send(t, sl.addr, path)
		r, answered := c.await(t, func() bool { return reached(path) > 0 })
		if !answered {
			held = append(held, c)
			continue
		}
		note(r)
		if r.proxyStatus == tryStatus {
			kept = append(kept, c)
		}
		break
	}
	t.Logf("%d requests held with %d descriptors", len(held), limit)
	if len(held) < 10 {
		t.Fatalf("only %d requests held before sluice ran out: sluice itself took %d descriptors?", len(held), sl.fds())
	}

	// None left: clients that arrive now are answered at accept.
	waiting := []*fdClient{send(t, sl.addr, "/shed/a"), send(t, sl.addr, "/shed/b")}
	for _, c := range waiting {
		r, _ := c.await(t, nil)
		note(r)
		if r.proxyStatus != shedStatus {
			t.Errorf("a client arriving with no descriptor left: %d, Proxy-Status %q; want %q", r.status, r.proxyStatus, shedStatus)
		}
	}

	// One left: a client is accepted on it, and its upstream connection
	// finds none. Twice, each time with a descriptor freed by a held
	// request answered with Connection: close.
	for i := range 2 {
		one <- struct{}{}
		freed := awaitAny(t, held)
		note(freed)
		sl.waitFDs(t, limit-1)
		c := send(t, sl.addr, fmt.Sprintf("/try/%d", i))
		r, _ := c.await(t, nil)
		note(r)
		if r.proxyStatus != tryStatus {
			t.Errorf("a client accepted on the last descriptor: %d, Proxy-Status %q; want %q", r.status, r.proxyStatus, tryStatus)
		}
		kept = append(kept, c)
	}

	// The load goes: the kept connections close, the held requests are
	// answered, and sluice is left with its pooled connections.
	for _, c := range kept {
		c.nc.Close()
	}
	close(gate)
	for range len(held) - 2 { // two were answered already
		note(awaitAny(t, held))
	}
	for _, c := range held {
		c.nc.Close()
	}
	sl.waitFDs(t, limit-16)

	// A burst, as the operator's 6,000 clients against 4,096
	// descriptors, of requests the upstreams answer in 100 ms, from
	// clients that hang up once answered: every client is answered 200,
	// or 503 at accept or after one try.
	const burst = 150
	burstClients := make([]*fdClient, burst)
	for i := range burst {
		burstClients[i] = send(t, sl.addr, fmt.Sprintf("/burst/%d", i), true)
	}
	before := [3]int{ok, shed, tried}
	for _, c := range burstClients {
		r, _ := c.await(t, nil)
		note(r)
	}
	t.Logf("burst of %d: %d 200, %d 503 at accept, %d 503 after a try", burst, ok-before[0], shed-before[1], tried-before[2])
	for _, c := range burstClients {
		c.nc.Close()
	}
	sl.waitFDs(t, limit-16)

	for i := range 10 {
		path := fmt.Sprintf("/after/%d", i)
		c := send(t, sl.addr, path)
		r, _ := c.await(t, nil)
		c.nc.Close()
		if r.status != 200 || r.body != "ok" {
			t.Errorf("after the load: %s got %d %q, Proxy-Status %q, %v; want 200 ok", path, r.status, r.body, r.proxyStatus, r.err)
		}
		if n := reached(path); n != 1 {
			t.Errorf("after the load: %s reached the upstreams %d times", path, n)
		}
	}
	t.Logf("%d answers: %d 200, %d 503 at accept, %d 503 after a try", len(replies), ok, shed, tried)
	if shed < 2 || tried < 2 {
		t.Errorf("%d clients answered at accept and %d after a try; want at least 2 of each", shed, tried)
	}

	// What sluice counted, and that it blamed no server.
	metrics := sl.scrape(t)
	for _, want := range []string{
		fmt.Sprintf(`sluice_local_exhaustion_total{op="accept",resource="descriptors"} %d`, shed),
		fmt.Sprintf(`sluice_local_exhaustion_total{op="upstream",resource="descriptors"} %d`, tried),
		fmt.Sprintf(`sluice_not_retried_total{reason="local_resources_exhausted",upstream="app"} %d`, tried),
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(metrics, `sluice_retries_total{reason="local_resources_exhausted"`) {
		t.Error("a try that found no descriptor was retried")
	}
	for _, u := range ups {
		if want := `sluice_upstream_server_healthy{server="` + u.Addr() + `",upstream="app"} 1`; !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	sl.stop(t)
	var limitLogged, warned, shedLogged bool
	triesLogged, triesHeldBack := 0, 0
	for _, l := range sl.log() {
		switch l["msg"] {
		case "upstream server health changed":
			t.Errorf("a server's health changed: %v", l)
		case "file descriptor limit":
			limitLogged = l["soft"] == float64(limit)
		case "file descriptor limit below what the configuration implies; raise it (ulimit -n, systemd LimitNOFILE=)":
			warned = l["needed"] == float64(ownDescriptors+2*3*32)
		case "upstream try failed; giving up":
			triesLogged++
			if n, ok := l["suppressed"].(float64); ok {
				triesHeldBack += int(n)
			}
			if want := "not retried: sluice itself failed (local_resources_exhausted), not the upstream"; l["decision"] != want {
				t.Errorf("a failed try logged with decision %q; want %q", l["decision"], want)
			}
		case "out of file descriptors; waiting clients answered 503 at accept":
			shedLogged = true
		}
	}
	// At most five lines a second about the tries: the first five are
	// written, and no try is both written and counted as held back.
	t.Logf("%d failed tries: %d lines, %d more said to be held back", tried, triesLogged, triesHeldBack)
	if !limitLogged || !warned || !shedLogged || triesLogged < min(tried, 5) || triesLogged+triesHeldBack > tried {
		t.Errorf("log lines: limit %v, warning %v, clients answered at accept %v, failed tries %d and %d held back of %d",
			limitLogged, warned, shedLogged, triesLogged, triesHeldBack, tried)
	}
	if t.Failed() {
		t.Logf("sluice's log:\n%s", sl.out.String())
	}
}

// child is sluice run in a child process.
type child struct {
	cmd           *exec.Cmd
	out           proxytest.Buffer
	done          chan error
	limit         int
	addr, metrics string
}

// startChild runs sluice run on config in a child process whose soft
// limit on open files is nofile, and waits until it listens.
func startChild(t *testing.T, nofile int, config string) *child {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{done: make(chan error, 1), limit: nofile}
	c.cmd = exec.Command(self)
	c.cmd.Env = append(os.Environ(), childNofile+"="+strconv.Itoa(nofile), childConfig+"="+path)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.done
	})
	if !wait.Until(wait.Timeout, func() bool {
		for _, l := range c.log() {
			if a, ok := l["address"].(string); ok {
				switch l["msg"] {
				case "listening":
					c.addr = a
				case "metrics":
					c.metrics = a
				}
			}
		}
		return c.addr != "" && c.metrics != ""
	}) {
		t.Fatalf("sluice run did not listen within %v:\n%s", wait.Timeout, c.out.String())
	}
	return c
}

// log returns sluice's log lines so far, as JSON objects.
func (c *child) log() []map[string]any {
	var lines []map[string]any
	for line := range strings.Lines(c.out.String()) {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil {
			lines = append(lines, l)
		}
	}
	return lines
}

// fds counts the child's open descriptors below limit: those it may
// open. (It may have inherited some above: the go command leaves one open
// to its test binaries.)
func (c *child) fds() int {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", c.cmd.Process.Pid))
	n := 0
	for _, f := range fds {
		if fd, err := strconv.Atoi(f.Name()); err == nil && fd < c.limit {
			n++
		}
	}
	return n
}

// waitFDs waits until the child has at most n descriptors open below its
// limit.
func (c *child) waitFDs(t *testing.T, n int) {
	t.Helper()
	if !wait.Until(wait.Timeout, func() bool { return c.fds() <= n }) {
		t.Fatalf("sluice holds %d descriptors %v on; want at most %d", c.fds(), wait.Timeout, n)
	}
}

// scrape returns the child's metrics.
func (c *child) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + c.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stop ends the child with SIGTERM, as an operator would, and checks that
// it drained and exited 0.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		c.done <- err
		if err != nil {
			t.Errorf("sluice run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("sluice run did not stop 10 s after TERM")
	}
}

// reply is what a client was told.
type reply struct {
	path              string
	status            int
	proxyStatus, body string
	err               error
}

// fdClient is one client connection with one request sent on it.
type fdClient struct {
	nc  net.Conn
	res chan reply
}

// send dials addr, sends GET path and reads the response in the
// background; it keeps the connection open, as a keep-alive client does,
// unless hangUp.
func send(t *testing.T, addr, path string, hangUp ...bool) *fdClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(nc, "GET "+path+" HTTP/1.1\r\nHost: fd.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c := &fdClient{nc: nc, res: make(chan reply, 1)}
	go func() {
		r := reply{path: path}
		resp, err := http.ReadResponse(bufio.NewReader(nc), &http.Request{Method: "GET"})
		if err == nil {
			var b []byte
			b, err = io.ReadAll(resp.Body)
			r.status, r.proxyStatus, r.body = resp.StatusCode, resp.Header.Get("Proxy-Status"), string(b)
		}
		r.err = err
		if len(hangUp) > 0 && hangUp[0] {
			nc.Close()
		}
		c.res <- r
	}()
	return c
}

// await waits for the answer, or until held reports the request reached an
// upstream (then answered is false).
func (c *fdClient) await(t *testing.T, held func() bool) (r reply, answered bool) {
	t.Helper()
	if !wait.Until(wait.Timeout, func() bool {
		select {
		case r = <-c.res:
			answered = true
			return true
		default:
		}
		return held != nil && held()
	}) {
		t.Fatalf("no answer within %v", wait.Timeout)
	}
	return r, answered
}

// awaitAny waits for the next answer to any of cs.
func awaitAny(t *testing.T, cs []*fdClient) reply {
	t.Helper()
	cases := make([]reflect.SelectCase, 0, len(cs)+1)
	for _, c := range cs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.res)})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(wait.Timeout))})
	i, r, _ := reflect.Select(cases)
	if i == len(cs) {
		t.Fatalf("no answer within %v", wait.Timeout)
	}
	return r.Interface().(reply)
}
