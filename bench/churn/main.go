// Command churn runs seed 004's scenario behind sluice and behind nginx,
// with the same load, and prints what the clients got and what the
// application did.
//
// The scenario: gunicorn's gthread workers recycle after --max-requests
// (no jitter), and a recycling worker takes its keep-alive connections
// with it; a request the proxy sends on one of them is reset. nginx
// (configured as in the seed: keepalive 32, HTTP/1.1, default
// proxy_next_upstream) retries GETs and answers POSTs 502.
//
//	go run ./bench/churn [-requests 3000] [-clients 16] [-proxies sluice,nginx]
//
// Every request carries a unique X-Request-Id; the WSGI app (e2e/testdata/
// app.py) records every id it processes. For each proxy and method, churn
// prints the status counts the clients saw, transport errors, ids processed
// more than once (dup), ids answered 2xx but never processed (lost), and
// whether the requests that failed had been processed by the app. Each
// proxy gets its own fresh gunicorn. Everything listens on 127.0.0.1 and
// runs in temporary directories; children are stopped on exit and on
// SIGINT/SIGTERM. churn installs nothing: when gunicorn or nginx is
// missing, it says so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/e2e"
)

func main() {
	os.Exit(run())
}

// options are the command line.
type options struct {
	requests, clients, workers, threads, maxRequests int
	keepAlive, delay, timeout                        time.Duration
	proxies, python, nginx                           string
	keep, verbose                                    bool
}

func run() int {
	var o options
	flag.IntVar(&o.requests, "requests", 3000, "requests per proxy, half POST half GET")
	flag.IntVar(&o.clients, "clients", 16, "concurrent keep-alive clients")
	flag.IntVar(&o.workers, "workers", 2, "gunicorn --workers")
	flag.IntVar(&o.threads, "threads", 4, "gunicorn --threads")
	flag.IntVar(&o.maxRequests, "max-requests", 200, "gunicorn --max-requests (no jitter)")
	flag.DurationVar(&o.keepAlive, "keep-alive", 5*time.Second, "gunicorn --keep-alive")
	flag.DurationVar(&o.delay, "delay", 2*time.Millisecond, "time the app takes per request")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on the whole run")
	flag.StringVar(&o.proxies, "proxies", "sluice,nginx",
		"proxies to run, in order: sluice, sluice-dial, sluice-reuse (pool.non_idempotent: dial, reuse), nginx")
	flag.StringVar(&o.python, "python", e2e.DefaultPython, "python with gunicorn installed")
	flag.StringVar(&o.nginx, "nginx", "/usr/sbin/nginx", "nginx binary")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directories (logs, configs, records)")
	flag.BoolVar(&o.verbose, "v", false, "print gunicorn's and the proxies' logs")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	if err := e2e.HaveGunicorn(o.python); err != nil {
		fmt.Fprintf(os.Stderr, "churn: missing gunicorn (Debian: python3-gunicorn): %v\n", err)
		return 1
	}
	var names []string
	for name := range strings.SplitSeq(o.proxies, ",") {
		switch name = strings.TrimSpace(name); name {
		case "sluice", "sluice-dial", "sluice-reuse":
		case "nginx":
			if _, err := exec.LookPath(o.nginx); err != nil {
				fmt.Printf("churn: missing nginx (Debian: nginx), not run: %v\n", err)
				continue
			}
		default:
			fmt.Fprintf(os.Stderr, "churn: unknown proxy %q\n", name)
			return 2
		}
		names = append(names, name)
	}

	fmt.Printf("churn: gunicorn gthread, %d workers x %d threads, --max-requests %d (no jitter), --keep-alive %d; app %s per request\n",
		o.workers, o.threads, o.maxRequests, int(o.keepAlive/time.Second), o.delay)
	fmt.Printf("load: %d requests per proxy from %d keep-alive clients; even ids POST (64-byte body, no Idempotency-Key), odd ids GET\n\n",
		o.requests, o.clients)
	fmt.Printf("%-11s %s\n", "proxy", e2e.Header)
	code := 0
	var notes []string
	for _, name := range names {
		n, err := runOne(ctx, o, name)
		notes = append(notes, n...)
		if err != nil {
			fmt.Fprintf(os.Stderr, "churn: %s: %v\n", name, err)
			code = 1
		}
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Println()
	for _, n := range notes {
		fmt.Println(n)
	}
	fmt.Println(`
statuses: what the clients got; errors: transport errors; mismatch: a response for another id;
processed: ids the app processed at least once; dup: more than once; lost: answered 2xx, never processed;
body: POST bodies that arrived with the wrong size; 5xx/err:processed: failed for the client although the
app processed it; 5xx/err:unprocessed: failed and the app never saw it.`)
	return code
}

// proxyUnderTest is a proxy running in front of gunicorn.
type proxyUnderTest interface {
	Addr() string
	// Stop stops it and waits until it has.
	Stop()
	// Notes says what the proxy itself reports about the run.
	Notes() []string
}

// runOne runs the load through one proxy in front of its own gunicorn,
// prints its table lines and returns notes to print after the table.
func runOne(ctx context.Context, o options, name string) ([]string, error) {
	dir, err := os.MkdirTemp("", "churn-"+name+"-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "churn: %s: files in %s\n", name, dir)
	} else {
		defer os.RemoveAll(dir)
	}
	appDir := filepath.Join(dir, "gunicorn")
	if err := os.Mkdir(appDir, 0o755); err != nil {
		return nil, err
	}
	glog, err := os.Create(filepath.Join(dir, "gunicorn.log"))
	if err != nil {
		return nil, err
	}
	defer glog.Close()
	g, err := e2e.StartGunicorn(ctx, e2e.GunicornOptions{
		Python: o.python, Dir: appDir, Log: glog,
		Workers: o.workers, Threads: o.threads, MaxRequests: o.maxRequests,
		KeepAlive: o.keepAlive, Delay: o.delay,
	})
	if err != nil {
		return nil, err
	}
	defer g.Stop()

	var p proxyUnderTest
	switch name {
	case "sluice":
		p, err = startSluice(ctx, g.Addr)
	case "sluice-dial":
		p, err = startSluice(ctx, g.Addr, "non_idempotent: dial")
	case "sluice-reuse":
		p, err = startSluice(ctx, g.Addr, "non_idempotent: reuse")
	case "nginx":
		pdir := filepath.Join(dir, "nginx")
		if err = os.Mkdir(pdir, 0o755); err == nil {
			var n *nginx
			n, err = startNginx(ctx, o.nginx, pdir, g.Addr)
			if err == nil {
				p = nginxProxy{n}
			}
		}
	}
	if err != nil {
		return nil, err
	}
	defer p.Stop()

	start := time.Now()
	results := e2e.Load{Addr: p.Addr(), Clients: o.clients, Requests: o.requests, Prefix: name}.Run(ctx)
	elapsed := time.Since(start)
	p.Stop()
	g.Stop()
	records, err := g.Records()
	if err != nil {
		return nil, err
	}
	rep := e2e.Tally(results, records, 64)
	for _, m := range rep.Methods {
		fmt.Printf("%-11s %s\n", name, m.Line())
	}
	notes := []string{fmt.Sprintf("%s: %d requests in %s; %d gunicorn worker processes seen (%d recycles); %d records of ids never sent",
		name, rep.Total(func(m *e2e.MethodReport) int { return m.Sent }), elapsed.Round(time.Millisecond),
		rep.PIDs, max(0, rep.PIDs-o.workers), rep.Unknown)}
	for _, n := range p.Notes() {
		notes = append(notes, name+": "+n)
	}
	if o.verbose {
		fmt.Fprintf(os.Stderr, "--- %s: gunicorn log\n", name)
		copyFile(os.Stderr, glog.Name())
	}
	return notes, ctx.Err()
}

// sluiceProxy is sluice serving in this process.
type sluiceProxy struct{ *e2e.Sluice }

func startSluice(ctx context.Context, upstream string, pool ...string) (proxyUnderTest, error) {
	s, err := e2e.StartSluice(e2e.SluiceConfig(upstream, pool...), nil)
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, s.Addr, nil); err != nil {
		s.Close()
		return nil, err
	}
	return sluiceProxy{s}, nil
}

func (s sluiceProxy) Addr() string { return s.Sluice.Addr }
func (s sluiceProxy) Stop()        { s.Close() }

func (s sluiceProxy) Notes() []string {
	st := s.Server.Pool.Stats()
	return []string{
		fmt.Sprintf("pool: hits %d, misses %d, stale %d, watched %d, expired %d, retired %d, evicted %d, too old for a POST %d, "+
			"POSTs dialed because the server had not earned trust %d",
			st.Hits, st.Misses, st.Stale, st.Watched, st.Expired, st.Retired, st.Evicted, st.TooOld, st.Untrusted),
		"failed tries: " + strings.Join(e2e.TrySummary(s.Log()), "; "),
	}
}

// nginxProxy is nginx in the foreground.
type nginxProxy struct{ *nginx }

func (n nginxProxy) Addr() string { return n.nginx.Addr }

func (n nginxProxy) Notes() []string {
	var notes []string
	if retried, err := n.Retried(); err == nil {
		notes = append(notes, fmt.Sprintf("requests nginx tried more than once (access log $upstream_status): GET %d, POST %d",
			retried["GET"], retried["POST"]))
	}
	if errs, err := n.Errors(); err == nil {
		notes = append(notes, "error log: "+strings.Join(errs, "; "))
	}
	return notes
}

// waitReady waits until the app answers its readiness probe through addr,
// done is closed, or 20 s pass.
func waitReady(ctx context.Context, addr string, done <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get("http://" + addr + "/-/ready")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.HasPrefix(string(body), "sluice-e2e app") {
				return nil
			}
			err = fmt.Errorf("readiness probe answered %d %q", resp.StatusCode, body)
		}
		select {
		case <-done:
			return errors.New("exited before it was ready")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 20s: %v", err)
		}
	}
}
