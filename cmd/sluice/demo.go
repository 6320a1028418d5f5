package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// demoFlags returns the demo's flags, for cmdDemo and for help.
func demoFlags(stderr io.Writer) (fs *flag.FlagSet, listen, adminAddr *string) {
	fs = flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen = fs.String("listen", "127.0.0.1:8080", "proxy `address`")
	adminAddr = fs.String("admin", "127.0.0.1:9901", "admin listener `address` (the status page); \"\" for none")
	return fs, listen, adminAddr
}

// demoCrashPath is where the flaky upstream reads a request whole, then
// resets the connection without answering.
const demoCrashPath = "/crash/"

// demoConfig is the demo's config file: the proxy on listen in front of
// the steady and the flaky upstreams, round robin; on /crash/, the flaky
// one first (balance: first, no passive health, so that it stays first),
// the steady one for a retry; the admin listener on adminAddr; the access
// log unbuffered, so that its lines come in order with the upstreams'.
func demoConfig(listen, adminAddr, steady, flaky string) string {
	admin := ""
	if adminAddr != "" {
		admin = "admin: {address: \"" + adminAddr + "\"}"
	}
	return fmt.Sprintf(`listen:
  - address: %[1]s
    protocols: [http/1.1, h2c]
%[2]s
access_log: {buffer: 0}
routes:
  - path_prefix: %[5]s
    upstream: crash
  - upstream: demo
upstreams:
  demo:
    servers:
      - address: %[3]s
      - address: %[4]s
    timeouts: {connect: 1s, response_header: 5s}
    retry: {tries: 3, on: [error, timeout], non_idempotent: keyed}
    balance: round_robin
  crash:
    servers:
      - address: %[4]s
      - address: %[3]s
    timeouts: {connect: 1s, response_header: 5s}
    retry: {tries: 2, on: [error, timeout], non_idempotent: keyed}
    balance: first
    health: {passive: {max_fails: 0, consecutive_failures: 0}}
`, listen, admin, steady, flaky, demoCrashPath)
}

// cmdDemo starts two built-in upstreams and sluice run in front of them,
// with its admin listener. One upstream behaves; the other closes every
// keep-alive connection when a second request arrives on it, without
// answering: the race every pooled proxy meets when an upstream's idle
// timeout or a worker recycle closes a connection just as a request goes
// out (seed 000); and on /crash/ it reads the request, then resets the
// connection: a request that may have been processed, which sluice does
// not send again unless it is safe.
func cmdDemo(args []string, stdout, stderr io.Writer) int {
	fs, listen, adminAddr := demoFlags(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice demo: unexpected arguments %q\n", fs.Args())
		return 2
	}
	logs := &lockedWriter{w: stderr} // sluice's lines and the upstreams', whole
	steady, stopSteady, err := startDemoUpstream("steady", false, logs)
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	defer stopSteady()
	flaky, stopFlaky, err := startDemoUpstream("flaky", true, logs)
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	defer stopFlaky()
	// sluice run's own start, on a file: SIGHUP reloads it as it would
	// any config.
	dir, err := os.MkdirTemp("", "sluice-demo-")
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(path, []byte(demoConfig(*listen, *adminAddr, steady, flaky)), 0o600); err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	cfg, hash, err := loadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	log := newLog(logs, cfg)
	r, err := start(path, cfg, loaded{hash, time.Now()}, logs, log, nil)
	if err != nil {
		log.Error("starting", "error", err)
		return 1
	}
	status := "off (-admin \"\")"
	if r.adminLn != nil {
		status = "http://" + r.adminLn.Addr().String() + "/status (each upstream's servers, health and tries)"
	}
	fmt.Fprint(stdout, demoText(r.sockets[0].ln.Addr().String(), status, steady, flaky))
	return r.serve()
}

// demoText is what the demo prints: where everything is (status: the
// status page's URL), and what to try, each with what it shows.
func demoText(addr, status, steady, flaky string) string {
	return strings.NewReplacer("ADDR", addr, "STATUS", status, "STEADY", steady, "FLAKY", flaky, "CRASH", demoCrashPath).Replace(
		`sluice demo: a proxy on http://ADDR in front of two upstreams:
  STEADY  steady
  FLAKY  flaky: closes a kept-alive connection when its second request arrives,
      without answering; on CRASH it reads the whole request, then resets the
      connection without answering
Status page: STATUS

Try (run each a few times; the log below shows every try):
  for i in 1 2 3 4 5 6; do curl -s http://ADDR/n/$i; done
      round robin: the GETs that meet a connection flaky closes are retried;
      every one gets 200
  curl -s -X POST -d item=1 http://ADDR/orders
      a POST gets 200 too: sluice sends a request that must not be sent twice
      on a new connection to a server it has not seen complete 1000 exchanges
      without dropping one (non_idempotent: learn), so flaky's drops never
      meet a POST
  curl -si -X POST -d item=1 http://ADDR/crash/orders
      flaky reads this POST, then resets the connection: it may have taken the
      order, and sluice cannot know, so it does not send it again: 502, with a
      Proxy-Status header that says what happened
  curl -si -X POST -H 'Idempotency-Key: order-42' -d item=1 http://ADDR/crash/orders
      the same POST with an idempotency key, which lets the upstream tell a
      repeat: sluice sends it again, to steady: 200
  curl -s --http2-prior-knowledge http://ADDR/hello
      HTTP/2 (cleartext, prior knowledge): a stream of its own, proxied to the
      HTTP/1.1 upstreams

Ctrl-C stops.
`)
}

// lockedWriter writes each Write whole, one at a time: sluice's log lines
// and the upstreams' do not interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// startDemoUpstream serves a tiny HTTP/1.1 upstream written with sluice's
// own wire package, and returns its address and how to stop it.
func startDemoUpstream(name string, flaky bool, logw io.Writer) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var conns atomic.Int64
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "upstream %s: "+format+"\n", append([]any{name}, args...)...)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open[nc] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				demoConn(nc, int(conns.Add(1)), flaky, logf)
				mu.Lock()
				delete(open, nc)
				mu.Unlock()
			}()
		}
	}()
	stop := func() {
		ln.Close()
		mu.Lock()
		for nc := range open {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
	return ln.Addr().String(), stop, nil
}

func demoConn(nc net.Conn, n int, flaky bool, logf func(string, ...any)) {
	defer nc.Close()
	r := h1.NewReader(nc)
	var req h1.Request
	var body h1.Body
	for seq := 1; ; seq++ {
		head, err := r.ReadHead(64<<10, true)
		if err != nil {
			return
		}
		if err := h1.ParseRequest(&req, head, 100); err != nil {
			return
		}
		f, err := h1.ValidateRequest(&req)
		if err != nil {
			return
		}
		size := 0
		body.Init(r, f, true, 64<<10)
		for !body.Done() {
			seg, err := body.Next()
			size += len(seg)
			if err != nil && !errors.Is(err, io.EOF) {
				return
			}
		}
		key := string(req.Header.Get("Idempotency-Key"))
		switch {
		case flaky && strings.HasPrefix(string(req.Target()), demoCrashPath):
			logf("conn#%d req#%d %s %s (%d body bytes%s): read it whole; resetting the connection without answering",
				n, seq, req.Method(), req.Target(), size, keyNote(key))
			if tc, ok := nc.(*net.TCPConn); ok {
				tc.SetLinger(0) // the close sends a reset
			}
			return
		case flaky && seq > 1:
			logf("conn#%d req#%d %s %s: closing the connection without answering", n, seq, req.Method(), req.Target())
			return
		}
		logf("conn#%d req#%d %s %s (%d body bytes%s): 200", n, seq, req.Method(), req.Target(), size, keyNote(key))
		msg := fmt.Sprintf("hello from the %s upstream (connection %d, request %d): %s %s\n", nameOf(flaky), n, seq, req.Method(), req.Target())
		fmt.Fprintf(nc, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
	}
}

func nameOf(flaky bool) string {
	if flaky {
		return "flaky"
	}
	return "steady"
}

func keyNote(key string) string {
	if key == "" {
		return ""
	}
	return ", Idempotency-Key " + key
}
