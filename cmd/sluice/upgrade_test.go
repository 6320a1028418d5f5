//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// buildSluice builds the sluice binary into dir with version v, and
// returns its path.
func buildSluice(t *testing.T, dir, name, v string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version="+v, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// processLog gathers the standard error of a sluice process and of the
// processes its upgrades start, which inherit it.
type processLog struct {
	buf  proxytest.Buffer
	done chan struct{} // closed when every process has closed it
}

func (l *processLog) wait(t *testing.T, what string, re *regexp.Regexp, n int) [][]string {
	t.Helper()
	var m [][]string
	if !wait.Until(processTimeout, func() bool { m = re.FindAllStringSubmatch(l.buf.String(), -1); return len(m) >= n }) {
		t.Fatalf("no %s (%d of %s) within %v; log:\n%s", what, n, re, processTimeout, l.buf.String())
	}
	return m
}

// processTimeout bounds the waits for what a process does (start, hand
// over, drain, exit): a test that is failing; a loaded machine building
// and starting binaries takes seconds.
const processTimeout = 30 * time.Second

// startSluice runs bin with the config at path; its log and its
// successors' go to the returned processLog.
func startSluice(t *testing.T, bin, path string, env ...string) (*exec.Cmd, *processLog) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "-c", path)
	cmd.Stderr, cmd.Stdout = w, w
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	l := &processLog{done: make(chan struct{})}
	go func() {
		io.Copy(&l.buf, r)
		r.Close()
		close(l.done)
	}()
	go cmd.Wait()
	return cmd, l
}

// exited reports whether process pid has exited (gone, or a zombie no one
// reaped yet).
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

func waitExited(t *testing.T, pid int, log *processLog) {
	t.Helper()
	if !wait.Until(processTimeout, func() bool { return exited(pid) }) {
		t.Fatalf("process %d still runs %v on; log:\n%s", pid, processTimeout, log.buf.String())
	}
}

// load drives requests at addr from clients that keep their connections
// alive and clients that open one per request, until stop; it counts what
// they got.
type load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	stop       chan struct{}
	wg         sync.WaitGroup
}

func startLoad(addr string, keepAlive, fresh int) *load {
	l := &load{stop: make(chan struct{})}
	run := func(c *http.Client) {
		defer l.wg.Done()
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			resp, err := c.Get("http://" + addr + "/")
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("status %d, Proxy-Status %q", resp.StatusCode, resp.Header.Get("Proxy-Status"))
				}
			}
			if err != nil {
				l.failed.Add(1)
				l.mu.Lock()
				if len(l.errs) < 20 {
					l.errs = append(l.errs, err.Error())
				}
				l.mu.Unlock()
				continue
			}
			l.ok.Add(1)
		}
	}
	for range keepAlive {
		l.wg.Add(1)
		go run(&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}})
	}
	for range fresh {
		l.wg.Add(1)
		go run(&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}})
	}
	return l
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

// TestUpgradeUnderLoad builds sluice, runs it, and upgrades it three times
// with USR2 (twice) and sluice upgrade (once) while clients send requests,
// on kept-alive connections and on a new connection each: no request
// fails, no connection is refused. Before the second upgrade a rebuilt
// binary (another version) replaces the file: the new process runs it.
// Then the config is made invalid and USR2 sent: the new process fails,
// the old one logs why and serves on. systemd's notifications go to a
// fake NOTIFY_SOCKET: READY=1, then MAINPID= of each new process.
func TestUpgradeUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := buildSluice(t, dir, "sluice", "v1")
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	path := filepath.Join(dir, "sluice.yaml")
	pidFile := filepath.Join(dir, "sluice.pid")
	config := fmt.Sprintf("listen: [{address: 127.0.0.1:0}, {address: 127.0.0.1:0, protocols: [h2c, http/1.1]}]\n"+
		"access_log: {enabled: false}\nlog: {level: info}\ntimeouts: {drain: 5s}\npid_file: %s\n"+
		"metrics: {address: 127.0.0.1:0}\nadmin: {address: 127.0.0.1:0}\n"+
		"routes: [{upstream: app}]\nupstreams:\n  app:\n    servers: [{address: %s}]\n", pidFile, up.Addr())
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	notify := fakeNotifySocket(t)
	_, log := startSluice(t, bin, path, "NOTIFY_SOCKET="+notify.addr)
	t.Cleanup(func() {
		if pid, err := readPIDFile(pidFile); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	listening := regexp.MustCompile(`msg=listening address=(127\.0\.0\.1:\d+)`)
	m := log.wait(t, "listening", listening, 2)
	addrs := []string{m[0][1], m[1][1]}
	notify.expect(t, "READY=1")
	pid := func() int {
		p, err := readPIDFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := pid()

	l1 := startLoad(addrs[0], 4, 4)
	l2 := startLoad(addrs[1], 2, 2)
	defer func() { // if a Fatal comes first
		select {
		case <-l1.stop:
		default:
			l1.end()
			l2.end()
		}
	}()
	upgraded := regexp.MustCompile(`msg="binary upgrade: the new process serves; draining" pid=(\d+)`)
	running := regexp.MustCompile(`msg="sluice run" version=(\S+) pid=(\d+) upgrade=true`)
	old := first
	for i := 1; i <= 3; i++ {
		before := l1.ok.Load() + l2.ok.Load()
		wait.Within(t, processTimeout, "the load under way", func() bool { return l1.ok.Load()+l2.ok.Load() >= before+200 })
		switch i {
		case 2:
			v2 := buildSluice(t, dir, "sluice.new", "v2")
			if err := os.Rename(v2, bin); err != nil { // as a package manager installs it
				t.Fatal(err)
			}
			fallthrough
		case 1:
			syscall.Kill(old, syscall.SIGUSR2)
		case 3:
			var out strings.Builder
			if code := run([]string{"upgrade", "-c", path}, &out, &out); code != 0 {
				t.Fatalf("sluice upgrade: exit %d: %s", code, out.String())
			}
		}
		m := log.wait(t, "upgrade", upgraded, i)
		next, _ := strconv.Atoi(m[i-1][1])
		r := log.wait(t, "new process", running, i)
		if got, _ := strconv.Atoi(r[i-1][2]); got != next {
			t.Fatalf("upgrade %d: the old process names %d, the new one says %d", i, next, got)
		}
		wantVersion := "v1"
		if i >= 2 {
			wantVersion = "v2"
		}
		if v := r[i-1][1]; v != wantVersion {
			t.Errorf("upgrade %d: the new process runs %s, want %s", i, v, wantVersion)
		}
		notify.expect(t, fmt.Sprintf("MAINPID=%d", next))
		waitExited(t, old, log)
		if p := pid(); p != next {
			t.Fatalf("upgrade %d: pid file holds %d, want %d", i, p, next)
		}
		old = next
	}
	before := l1.ok.Load() + l2.ok.Load()
	wait.Within(t, processTimeout, "the load under way", func() bool { return l1.ok.Load()+l2.ok.Load() >= before+200 })
	l1.end()
	l2.end()
	// The metrics and admin listeners went over with the others: each
	// new process serves them on the first one's sockets.
	for _, name := range []string{"metrics", "admin"} {
		m := regexp.MustCompile(`msg=`+name+` address=(\S+)`).FindAllStringSubmatch(log.buf.String(), -1)
		if len(m) != 4 {
			t.Errorf("%d %s lines, want 4 (one per process)", len(m), name)
		}
		for _, a := range m[1:] {
			if a[1] != m[0][1] {
				t.Errorf("%s at %s after an upgrade, %s before", name, a[1], m[0][1])
			}
		}
	}
	for _, l := range []*load{l1, l2} {
		if n := l.failed.Load(); n > 0 {
			t.Errorf("%d of %d requests failed during the upgrades: %v", n, n+l.ok.Load(), l.errs)
		}
	}
	t.Logf("%d requests, none failed, over three upgrades", l1.ok.Load()+l2.ok.Load())

	// A new process that cannot start leaves the old one serving.
	if err := os.WriteFile(path, []byte("listen: [{address: 127.0.0.1:0}]\nroutes: [{upstream: nowhere}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(old, syscall.SIGUSR2)
	log.wait(t, "failed upgrade", regexp.MustCompile(`level=ERROR msg="binary upgrade failed; still serving" error=".*exited without becoming ready`), 1)
	if p := pid(); p != old {
		t.Errorf("after a failed upgrade the pid file holds %d, want %d", p, old)
	}
	for _, a := range addrs {
		resp, err := http.Get("http://" + a + "/")
		if err != nil {
			t.Fatalf("after a failed upgrade: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("after a failed upgrade: %d", resp.StatusCode)
		}
	}
	syscall.Kill(old, syscall.SIGTERM)
	notify.expect(t, "STOPPING=1")
	select {
	case <-log.done:
	case <-time.After(30 * time.Second):
		syscall.Kill(old, syscall.SIGQUIT)
		select { // its goroutines' stacks reach the log as it exits
		case <-log.done:
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("sluice did not stop 30 s after TERM:\n%s", log.buf.String())
	}
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Errorf("pid file left behind: %v", err)
	}
}

// notifySocket is a fake systemd NOTIFY_SOCKET: it gathers what is sent.
type notifySocket struct {
	addr string
	mu   sync.Mutex
	got  []string // each datagram
}

func fakeNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	addr := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	n := &notifySocket{addr: addr}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.got = append(n.got, string(buf[:k]))
			n.mu.Unlock()
		}
	}()
	return n
}

// messages returns the datagrams received so far.
func (n *notifySocket) messages() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.got...)
}

// expect waits for a datagram holding the line want, and returns it.
func (n *notifySocket) expect(t *testing.T, want string) string {
	t.Helper()
	var got string
	found := func() bool {
		for _, m := range n.messages() {
			sc := bufio.NewScanner(strings.NewReader(m))
			for sc.Scan() {
				if sc.Text() == want {
					got = m
					return true
				}
			}
		}
		return false
	}
	if !wait.Until(30*time.Second, found) {
		t.Fatalf("no %q on NOTIFY_SOCKET within 30 s; got %q", want, n.messages())
	}
	return got
}

// TestUpgradeUnixSockets upgrades a sluice that listens on Unix sockets
// (a listener, the admin listener and the metrics endpoint) while a
// client sends requests through one: the new process takes the same
// sockets (the same files, the admin one's mode kept), no request fails,
// the old process leaves the files to it, and the new one removes them
// when it stops.
func TestUpgradeUnixSockets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := buildSluice(t, dir, "sluice", "v1")
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	sockDir := shortDir(t)
	socks := map[string]string{}
	for _, name := range []string{"proxy", "admin", "metrics"} {
		socks[name] = filepath.Join(sockDir, name+".sock")
	}
	path := filepath.Join(dir, "sluice.yaml")
	pidFile := filepath.Join(dir, "sluice.pid")
	config := fmt.Sprintf("listen: [{address: \"unix:%s\"}]\naccess_log: {enabled: false}\ntimeouts: {drain: 5s}\npid_file: %s\n"+
		"metrics: {address: \"unix:%s\"}\nadmin: {address: \"unix:%s\", mode: 0600}\n"+
		"routes: [{upstream: app}]\nupstreams:\n  app:\n    servers: [{address: %s}]\n",
		socks["proxy"], pidFile, socks["metrics"], socks["admin"], up.Addr())
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	_, log := startSluice(t, bin, path)
	t.Cleanup(func() {
		if pid, err := readPIDFile(pidFile); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	log.wait(t, "listening", regexp.MustCompile(`msg=listening address=unix:`), 1)
	// The pid file is written once the listeners serve, after they log.
	var first int
	wait.Within(t, processTimeout, "the pid file", func() bool {
		var err error
		first, err = readPIDFile(pidFile)
		return err == nil
	})
	before := map[string]os.FileInfo{}
	for name, p := range socks {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s socket: %v", name, err)
		}
		before[name] = fi
	}

	// A client sending requests through the socket, kept alive, until
	// stopped.
	var ok, failed atomic.Int64
	var errs []string
	var mu sync.Mutex
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		client := unixClient(socks["proxy"])
		client.Timeout = 10 * time.Second
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := client.Get("http://app.example/")
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				failed.Add(1)
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
				continue
			}
			ok.Add(1)
		}
	}()
	stopLoad := sync.OnceFunc(func() { close(stop); <-done })
	t.Cleanup(stopLoad)
	waitOK := func(n int64) {
		t.Helper()
		target := ok.Load() + n
		if !wait.Until(processTimeout, func() bool { return ok.Load() >= target || failed.Load() > 100 }) || failed.Load() > 100 {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the load: %d ok (waiting for %d), %d failed: %v", ok.Load(), target, failed.Load(), errs[:min(len(errs), 10)])
		}
	}
	waitOK(200)

	syscall.Kill(first, syscall.SIGUSR2)
	m := log.wait(t, "upgrade", regexp.MustCompile(`msg="binary upgrade: the new process serves; draining" pid=(\d+)`), 1)
	next, _ := strconv.Atoi(m[0][1])
	waitExited(t, first, log)
	waitOK(200)
	stopLoad()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed across the upgrade: %v", n, n+ok.Load(), errs) // the client has stopped
	}
	for name, p := range socks {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s socket after the upgrade: %v", name, err)
		}
		if !os.SameFile(before[name], fi) {
			t.Errorf("%s socket: a new file after the upgrade, want the one handed over", name)
		}
	}
	if fi, _ := os.Stat(socks["admin"]); fi.Mode().Perm() != 0o600 {
		t.Errorf("admin socket mode %v after the upgrade, want 0600", fi.Mode().Perm())
	}
	resp, err := unixClient(socks["admin"]).Get("http://localhost/live")
	if err != nil {
		t.Fatalf("the admin listener after the upgrade: %v", err)
	}
	resp.Body.Close()

	syscall.Kill(next, syscall.SIGTERM)
	select {
	case <-log.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice did not stop 30 s after TERM:\n%s", log.buf.String())
	}
	for name, p := range socks {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s socket file left behind by the stopped process: %v", name, err)
		}
	}
	t.Logf("%d requests through the Unix socket across the upgrade, none failed", ok.Load())
}
