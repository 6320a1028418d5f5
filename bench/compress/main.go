// Command compress measures what compressing responses costs the sluice
// binary, beside nginx's gzip at the same level:
//
//	go run ./bench/compress [-requests 200] [-clients 2] [-level 5] [-sluice BIN] [-nginx BIN] [-keep]
//
// It serves about 1 MiB of JSON (Content-Length framed) from an upstream in
// this process, runs sluice (a route with compress, gzip at -level) and
// nginx (gzip on, gzip_comp_level -level, gzip_proxied any) in front of it,
// each with one worker (GOMAXPROCS=1, worker_processes 1), and fetches the
// JSON -requests times from -clients concurrent clients through each: with
// Accept-Encoding: gzip, then without (the same bytes proxied, not
// compressed). It prints, for each proxy and run, the proxy's CPU per MiB
// of JSON (user and system, from /proc/PID/stat), the compressed size,
// and sluice's ratio to nginx; then sluice's figures for zstd and br at
// their default levels. Every compressed body is decoded once and checked
// against the JSON. Linux only (/proc); everything listens on 127.0.0.1.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/sluice-proxy/sluice/bench/internal/rig"
	"github.com/sluice-proxy/sluice/internal/corpus"
)

func main() {
	requests := flag.Int("requests", 200, "requests per run")
	clients := flag.Int("clients", 2, "concurrent clients")
	level := flag.Int("level", 5, "gzip level, both proxies (1..9)")
	bin := flag.String("sluice", "", "sluice `binary` (default: build ./cmd/sluice into the temp dir)")
	nginxBin := flag.String("nginx", "nginx", "nginx `binary`")
	keep := flag.Bool("keep", false, "keep the temp dir (configs and logs) and print its path")
	flag.Parse()
	if err := run(*requests, *clients, *level, *bin, *nginxBin, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "compress:", err)
		os.Exit(1)
	}
}

// proc is a proxy under measurement.
type proc struct {
	name string
	addr string
	pid  int
}

// result is one measured run.
type result struct {
	cpuPerMiB  float64 // the proxy's CPU ms per MiB of JSON
	compressed int64   // bytes of one response body
	took       time.Duration
}

func run(requests, clients, level int, bin, nginxBin string, keep bool) error {
	if level < 1 || level > 9 {
		return fmt.Errorf("-level %d: want 1..9", level)
	}
	nginxPath, err := exec.LookPath(nginxBin)
	if err != nil {
		return fmt.Errorf("nginx is needed (apt-get install -y nginx): %w", err)
	}
	dir, remove, err := rig.TempDir("compressbench", keep)
	if err != nil {
		return err
	}
	defer remove()
	bin, err = rig.Binary(bin, dir)
	if err != nil {
		return err
	}
	body := corpus.JSON(1 << 20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})}
	go up.Serve(ln)
	defer up.Close()
	upstream := ln.Addr().String()

	// One worker each: GOMAXPROCS for sluice (inherited), worker_processes
	// for nginx.
	os.Setenv("GOMAXPROCS", "1")
	addr := fmt.Sprintf("127.0.0.1:%d", rig.FreePort())
	cfg := fmt.Sprintf(`listen: [{address: %q}]
access_log: {enabled: false}
log: {level: error}
routes:
  - path_prefix: /gzip/
    upstream: app
    compress: {algorithms: [gzip], min_size: 0, types: [application/json], level: {gzip: %d}}
  - path_prefix: /zstd/
    upstream: app
    compress: {algorithms: [zstd], min_size: 0, types: [application/json]}
  - path_prefix: /br/
    upstream: app
    compress: {algorithms: [br], min_size: 0, types: [application/json]}
  - upstream: app
upstreams:
  app:
    servers: [{address: %q}]
`, addr, level, upstream)
	sl, err := rig.Start(bin, filepath.Join(dir, "run"), addr, cfg)
	if err != nil {
		return err
	}
	defer sl.Stop()
	ctx := context.Background()
	if err := sl.WaitServing(ctx, func() error { _, err := fetch(addr, "/gzip/", ""); return err }); err != nil {
		return err
	}
	ng, err := startNginx(nginxPath, filepath.Join(dir, "nginx"), upstream, level)
	if err != nil {
		return err
	}
	defer ng.stop()

	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: clients}}
	measure := func(p proc, path, coding string) (result, error) {
		// Warm-up, and the check that the body decodes to the JSON.
		got, err := fetchWith(client, p.addr, path, coding)
		if err != nil {
			return result{}, fmt.Errorf("%s %s: %w", p.name, path, err)
		}
		if err := check(got, coding, body); err != nil {
			return result{}, fmt.Errorf("%s %s %s: %w", p.name, path, coding, err)
		}
		for range 10 {
			fetchWith(client, p.addr, path, coding)
		}
		cpu0, err := rig.CPUSeconds(p.pid)
		if err != nil {
			return result{}, err
		}
		t0 := time.Now()
		var next atomic.Int64
		var first atomic.Value
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(requests) {
					if _, err := fetchWith(client, p.addr, path, coding); err != nil {
						first.CompareAndSwap(nil, err)
					}
				}
			}()
		}
		wg.Wait()
		took := time.Since(t0)
		cpu1, _ := rig.CPUSeconds(p.pid)
		if err, ok := first.Load().(error); ok {
			return result{}, fmt.Errorf("%s: %w", p.name, err)
		}
		mib := float64(requests) * float64(len(body)) / (1 << 20)
		return result{cpuPerMiB: (cpu1 - cpu0) * 1000 / mib, compressed: int64(len(got)), took: took}, nil
	}

	s := proc{"sluice", addr, sl.Pid}
	n := proc{"nginx", ng.addr, ng.pid()}
	fmt.Printf("%d requests for %d bytes of JSON from %d clients, each proxy one worker; CPU from /proc/PID/stat (1/100 s ticks)\n\n",
		requests, len(body), clients)
	fmt.Println("| proxy | run | CPU ms per MiB of JSON | body bytes | ratio | wall s |")
	fmt.Println("|---|---|--:|--:|--:|--:|")
	rows := []struct {
		p            proc
		path, coding string
		label        string
	}{
		{s, "/gzip/", "gzip", fmt.Sprintf("gzip level %d", level)},
		{n, "/gzip/", "gzip", fmt.Sprintf("gzip level %d", level)},
		{s, "/plain/", "", "not compressed"},
		{n, "/plain/", "", "not compressed"},
		{s, "/zstd/", "zstd", "zstd level 3 (default)"},
		{s, "/br/", "br", "br level 4 (default)"},
	}
	results := make([]result, len(rows))
	for i, row := range rows {
		r, err := measure(row.p, row.path, row.coding)
		if err != nil {
			return err
		}
		results[i] = r
		fmt.Printf("| %s | %s | %.2f | %d | %.3f | %.1f |\n", row.p.name, row.label, r.cpuPerMiB, r.compressed,
			float64(r.compressed)/float64(len(body)), r.took.Seconds())
	}
	fmt.Printf("\nsluice ÷ nginx, CPU per MiB gzipped at level %d: %.2f (not compressed: %.2f)\n", level,
		results[0].cpuPerMiB/results[1].cpuPerMiB, results[2].cpuPerMiB/results[3].cpuPerMiB)
	fmt.Printf("compression's own share, compressed minus not compressed: sluice %.2f ms/MiB, nginx %.2f ms/MiB (%.2fx)\n",
		results[0].cpuPerMiB-results[2].cpuPerMiB, results[1].cpuPerMiB-results[3].cpuPerMiB,
		(results[0].cpuPerMiB-results[2].cpuPerMiB)/(results[1].cpuPerMiB-results[3].cpuPerMiB))
	if keep {
		fmt.Fprintln(os.Stderr, "kept:", dir)
	}
	return nil
}

// fetch GETs path from addr with a client of its own.
func fetch(addr, path, coding string) ([]byte, error) {
	return fetchWith(&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}, addr, path, coding)
}

// fetchWith GETs path from addr, asking for coding ("" for none), and
// returns the body as it came.
func fetchWith(c *http.Client, addr, path, coding string) ([]byte, error) {
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	if coding != "" {
		req.Header.Set("Accept-Encoding", coding)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("Content-Encoding"); got != coding {
		return nil, fmt.Errorf("Content-Encoding %q, want %q", got, coding)
	}
	return b, nil
}

// check decodes got (coding "" is none) and compares it with want.
func check(got []byte, coding string, want []byte) error {
	var r io.Reader = bytes.NewReader(got)
	switch coding {
	case "gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		r = zr
	case "br":
		r = brotli.NewReader(r)
	case "zstd":
		zr, err := zstd.NewReader(r)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if !bytes.Equal(b, want) {
		return errors.New("the decoded body is not the JSON sent")
	}
	return nil
}

// nginxConf: one worker, gzip at the level given for JSON of any size and
// any proxied response, keep-alive to the upstream, no access log.
const nginxConf = `daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    keepalive_requests 1000000;
    upstream app {
        server %[2]s;
        keepalive 32;
    }
    server {
        listen %[3]s;
        gzip on;
        gzip_comp_level %[4]d;
        gzip_types application/json;
        gzip_min_length 0;
        gzip_proxied any;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
`

type nginx struct {
	addr string
	dir  string
	cmd  *exec.Cmd
}

// startNginx runs nginx with its prefix, config, pid and logs in dir and
// waits until it answers.
func startNginx(bin, dir, upstream string, level int) (*nginx, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Workers run as nobody when the master is root: let them in.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", rig.FreePort())
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, upstream, addr, level), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	n := &nginx{addr: addr, dir: dir, cmd: cmd}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := fetch(addr, "/gzip/", "gzip")
		if err == nil {
			return n, nil
		}
		if time.Now().After(deadline) {
			n.stop()
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return nil, fmt.Errorf("nginx does not answer on %s: %v\n%s", addr, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pid returns the pid of nginx's one worker (the master does no
// proxying), or the master's if the worker cannot be found.
func (n *nginx) pid() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", n.cmd.Process.Pid, n.cmd.Process.Pid))
	if err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if p, err := strconv.Atoi(f[0]); err == nil {
				return p
			}
		}
	}
	return n.cmd.Process.Pid
}

// stop ends nginx's process group and waits for the master.
func (n *nginx) stop() {
	syscall.Kill(-n.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}
