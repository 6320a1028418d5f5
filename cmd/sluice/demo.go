package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// demoFlags returns the demo's flags, for cmdDemo and for help.
func demoFlags(stderr io.Writer) (fs *flag.FlagSet, listen *string) {
	fs = flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen = fs.String("listen", "127.0.0.1:8080", "proxy `address`")
	return fs, listen
}

// cmdDemo starts two built-in upstreams and a proxy in front of them. One
// upstream behaves; the other closes every keep-alive connection when a
// second request arrives on it, without answering: the race every pooled
// proxy meets when an upstream's idle timeout or a worker recycle closes a
// connection just as a request goes out (seed 000).
func cmdDemo(args []string, stdout, stderr io.Writer) int {
	fs, listen := demoFlags(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	steady, err := startDemoUpstream("steady", false, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	flaky, err := startDemoUpstream("flaky", true, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	yaml := fmt.Sprintf(`
listen:
  - address: %s
    protocols: [http/1.1, h2c]
routes:
  - upstream: demo
upstreams:
  demo:
    servers:
      - address: %s
      - address: %s
    timeouts: {connect: 1s, response_header: 5s}
    retry: {tries: 3, on: [error, timeout], non_idempotent: keyed}
    balance: round_robin
`, *listen, steady, flaky)
	cfg, err := config.Parse("demo.yaml", []byte(yaml))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	slog.SetDefault(log)
	gen, err := config.Build(cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	gen.Start(context.Background())
	defer gen.Close()
	srv, closer, err := config.NewServer(cfg, gen, log)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer closer.Close()
	ln, err := proxy.Listen(*listen)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	addr := ln.Addr().String()
	fmt.Fprintf(stdout, `sluice demo: proxy on http://%[1]s in front of two upstreams:
  %[2]s  steady
  %[3]s  flaky: closes a kept-alive connection when its second request arrives, without answering

Try (run each a few times; the log below shows every try):
  curl -s http://%[1]s/hello
  curl -s -X POST -d item=1 http://%[1]s/orders
      a POST the flaky upstream may drop: retried only when nothing of it was
      sent; otherwise 502 with a Proxy-Status header, and never sent twice
  curl -s -X POST -H 'Idempotency-Key: order-42' -d item=1 http://%[1]s/orders
      the same POST with an idempotency key: retried on another connection
  for i in 1 2 3 4 5 6; do curl -s http://%[1]s/n/$i; done
  curl -s --http2-prior-knowledge http://%[1]s/hello
      the same over HTTP/2 (cleartext, prior knowledge): a stream of its own,
      proxied to the HTTP/1.1 upstreams

Ctrl-C stops.
`, addr, steady, flaky)
	opts := []proxy.ListenerOptions{{Protocols: cfg.Listen[0].Protocols}}
	return serve(srv, []net.Listener{ln}, opts, 2*time.Second, log, nil, nil)
}

// startDemoUpstream serves a tiny HTTP/1.1 upstream written with sluice's
// own wire package, and returns its address.
func startDemoUpstream(name string, flaky bool, logw io.Writer) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	var conns atomic.Int64
	var mu sync.Mutex
	logf := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(logw, "upstream %s: "+format+"\n", append([]any{name}, args...)...)
		mu.Unlock()
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go demoConn(nc, name, int(conns.Add(1)), flaky, logf)
		}
	}()
	return ln.Addr().String(), nil
}

func demoConn(nc net.Conn, name string, n int, flaky bool, logf func(string, ...any)) {
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
			if err != nil && err != io.EOF {
				return
			}
		}
		if flaky && seq > 1 {
			logf("conn#%d req#%d %s %s: closing the connection without answering", n, seq, req.Method(), req.Target())
			return
		}
		key := string(req.Header.Get("Idempotency-Key"))
		logf("conn#%d req#%d %s %s (%d body bytes%s): 200", n, seq, req.Method(), req.Target(), size, keyNote(key))
		msg := fmt.Sprintf("hello from the %s upstream (connection %d, request %d): %s %s\n", name, n, seq, req.Method(), req.Target())
		fmt.Fprintf(nc, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
	}
}

func keyNote(key string) string {
	if key == "" {
		return ""
	}
	return ", Idempotency-Key " + key
}
