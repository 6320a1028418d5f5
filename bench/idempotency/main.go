// Command idempotency measures what the idempotency layer costs the sluice
// binary: the CPU time sluice spends per keyed POST through a route with
// the layer (the local store, and Redis), against the same POST through a
// route without it, in one run, the routes interleaved round by round.
//
//	go run ./bench/idempotency [-rounds 7] [-requests 100000] [-conns 8] [-procs 1] [-redis=true] [-sluice BIN]
//
// Each request is a POST of 60 bytes with a new Idempotency-Key, on one
// of -conns kept-alive connections, answered 201 with 90 bytes by an
// upstream in this program. The routes differ only in their idempotency
// section: none (/plain/), store: local (/local/) and store: redis
// (/redis/, with a redis-server this program starts when -redis and the
// program is installed). A round sends -requests requests to each route
// in turn (the order rotates from round to round) and reads the CPU time
// sluice used for them from /proc/PID/stat (user and system, in ticks of
// 10 ms: a round of 100000 requests at 17 µs is 170 ticks, where one of
// 20000 was 34, a granularity of 3% for the plain POST); with Redis,
// redis-server's too. Before the rounds, 2000 requests warm sluice up and
// have the upstream earn the pool's trust (pool.non_idempotent: learn),
// which requests the layer forwards need to take pooled connections.
//
// It prints, for each route, the median of the rounds' CPU time per
// request and their range, and for each route with the layer its median
// ratio to /plain/ of the same round, with the range of those ratios.
// On a machine shared with other work, CPU time per request holds far
// better than throughput, but not perfectly: run enough rounds.
// Everything listens on 127.0.0.1; sluice and redis-server run in a temp
// dir and are killed on exit. Linux only (bench/internal/rig).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/bench/internal/rig"
)

type options struct {
	rounds, requests, conns, procs int
	redis                          bool
	sluice                         string
	keep                           bool
}

func main() {
	var o options
	flag.IntVar(&o.rounds, "rounds", 7, "rounds; each sends -requests requests to each route")
	flag.IntVar(&o.requests, "requests", 100000, "requests per route per round")
	flag.IntVar(&o.conns, "conns", 8, "kept-alive client connections, each sending one request at a time")
	flag.IntVar(&o.procs, "procs", 1, "sluice's GOMAXPROCS")
	flag.BoolVar(&o.redis, "redis", true, "also measure store: redis (needs redis-server)")
	flag.StringVar(&o.sluice, "sluice", "", "sluice `binary` (default: build ./cmd/sluice into the temp dir)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp dir (config and logs) and print its path")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "idempotency:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.rounds < 1 || o.requests < o.conns || o.conns < 1 || o.procs < 1 {
		return errors.New("-rounds, -conns and -procs must be at least 1, and -requests at least -conns")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, remove, err := rig.TempDir("sluice-idempotency-", o.keep)
	if err != nil {
		return err
	}
	defer remove()
	bin, err := rig.Binary(o.sluice, dir)
	if err != nil {
		return err
	}
	upstream, err := serveOrders()
	if err != nil {
		return err
	}

	routes := []string{"plain", "local"}
	redisSection, redisPid := "", 0
	if o.redis {
		r, err := startRedis(ctx, dir)
		if err != nil {
			return err
		}
		defer r.stop()
		routes = append(routes, "redis")
		redisSection, redisPid = fmt.Sprintf("redis: {address: %s, timeout: 1s}\n", r.addr), r.cmd.Process.Pid
	}
	addr := fmt.Sprintf("127.0.0.1:%d", rig.FreePort())
	// The local store holds every key of the run (a day's ttl, as by
	// default), up to a million.
	config := fmt.Sprintf(`listen:
  - address: %s
access_log: {enabled: false}
log: {level: error}
%sroutes:
  - path_prefix: /plain/
    upstream: app
  - path_prefix: /local/
    upstream: app
    idempotency: {store: local, max_keys: 1000000, max_bytes: 1GiB}
`, addr, redisSection)
	if o.redis {
		config += "  - path_prefix: /redis/\n    upstream: app\n    idempotency: {store: redis}\n"
	}
	config += fmt.Sprintf("upstreams:\n  app:\n    servers: [{address: %s}]\n    pool: {max_idle: 256}\n", upstream)
	os.Setenv("GOMAXPROCS", strconv.Itoa(o.procs)) // for sluice, which inherits it
	s, err := rig.Start(bin, filepath.Join(dir, "run"), addr, config)
	if err != nil {
		return err
	}
	defer s.Stop()
	var seq atomic.Int64
	if err := s.WaitServing(ctx, func() error { return oneRequest(addr, "plain", &seq) }); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "sluice %s, GOMAXPROCS=%d; %d rounds of %d requests per route on %d connections\n",
		addr, o.procs, o.rounds, o.requests, o.conns)
	for _, r := range routes {
		if _, err := load(ctx, addr, r, 2000/len(routes), o.conns, &seq); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}

	cpu := make(map[string][]float64)   // µs of sluice's CPU per request, by route, one per round
	redisCPU := []float64{}             // µs of redis-server's per request, /redis/
	ratio := make(map[string][]float64) // per round, against /plain/
	rate := make(map[string][]float64)  // requests per second
	for round := range o.rounds {
		got := make(map[string]float64)
		for i := range routes {
			r := routes[(i+round)%len(routes)]
			before, err := rig.CPUSeconds(s.Pid)
			if err != nil {
				return err
			}
			var redisBefore float64
			if r == "redis" {
				redisBefore, _ = rig.CPUSeconds(redisPid)
			}
			took, err := load(ctx, addr, r, o.requests, o.conns, &seq)
			if err != nil {
				return fmt.Errorf("round %d, /%s/: %w", round+1, r, err)
			}
			after, err := rig.CPUSeconds(s.Pid)
			if err != nil {
				return err
			}
			us := (after - before) * 1e6 / float64(o.requests)
			got[r] = us
			cpu[r] = append(cpu[r], us)
			rate[r] = append(rate[r], float64(o.requests)/took.Seconds())
			line := fmt.Sprintf("round %d /%s/: %.1f µs of sluice's CPU per request, %.0f requests/s", round+1, r, us, float64(o.requests)/took.Seconds())
			if r == "redis" {
				redisAfter, _ := rig.CPUSeconds(redisPid)
				rus := (redisAfter - redisBefore) * 1e6 / float64(o.requests)
				redisCPU = append(redisCPU, rus)
				line += fmt.Sprintf(", %.1f µs of redis-server's", rus)
			}
			fmt.Fprintln(os.Stderr, line)
		}
		for _, r := range routes[1:] {
			ratio[r] = append(ratio[r], got[r]/got["plain"])
		}
	}

	fmt.Printf("sluice's CPU time per keyed POST, %d rounds of %d requests per route, GOMAXPROCS=%d, %d connections:\n\n",
		o.rounds, o.requests, o.procs, o.conns)
	fmt.Println("| route | CPU per request, median (range) | requests/s, median | × /plain/, median (range) |")
	fmt.Println("| --- | --- | --- | --- |")
	for _, r := range routes {
		m, lo, hi := stats(cpu[r])
		row := fmt.Sprintf("| /%s/ | %.1f µs (%.1f–%.1f) | %.0f |", r, m, lo, hi, median(rate[r]))
		if r == "plain" {
			row += " |"
		} else {
			m, lo, hi := stats(ratio[r])
			row += fmt.Sprintf(" %.2f (%.2f–%.2f) |", m, lo, hi)
		}
		fmt.Println(row)
	}
	if len(redisCPU) > 0 {
		m, lo, hi := stats(redisCPU)
		fmt.Printf("\nredis-server's CPU per request on /redis/: %.1f µs (%.1f–%.1f)\n", m, lo, hi)
	}
	return nil
}

// load sends n keyed POSTs to route over conns kept-alive connections,
// each request a new key, and returns how long they took.
func load(ctx context.Context, addr, route string, n, conns int, seq *atomic.Int64) (time.Duration, error) {
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for c := range conns {
		share := n / conns
		if c < n%conns {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := dial(addr)
			if err != nil {
				errs <- err
				return
			}
			defer cl.nc.Close()
			for range share {
				if ctx.Err() != nil {
					errs <- ctx.Err()
					return
				}
				if err := cl.post(route, seq.Add(1)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return time.Since(start), <-errs
}

// client is one kept-alive connection to sluice.
type client struct {
	nc  net.Conn
	br  *bufio.Reader
	buf []byte
}

func dial(addr string) (*client, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &client{nc: nc, br: bufio.NewReader(nc)}, nil
}

// requestBody is every request's body: 60 bytes of JSON.
var requestBody = `{"customer":1234,"item":"book-0042","quantity":1,"gift":false}`[:60]

// post sends POST /route/orders with key n and reads the answer, which
// must be 201.
func (c *client) post(route string, n int64) error {
	b := append(c.buf[:0], "POST /"...)
	b = append(b, route...)
	b = append(b, "/orders HTTP/1.1\r\nHost: shop.test\r\nContent-Type: application/json\r\nIdempotency-Key: order-"...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(requestBody)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, requestBody...)
	c.buf = b
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		return err
	}
	status, length, err := readHead(c.br)
	if err != nil {
		return err
	}
	if _, err := c.br.Discard(length); err != nil {
		return err
	}
	if status != 201 {
		return fmt.Errorf("/%s/: status %d", route, status)
	}
	return nil
}

// readHead reads a response or request head and returns its status (0
// for a request) and Content-Length.
func readHead(br *bufio.Reader) (status, length int, err error) {
	first := true
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, 0, err
		}
		if len(line) <= 2 {
			return status, length, nil
		}
		if first {
			first = false
			if f := bytes.Fields(line); len(f) > 1 && bytes.HasPrefix(line, []byte("HTTP/")) {
				status, _ = strconv.Atoi(string(f[1]))
			}
			continue
		}
		if name, v, ok := bytes.Cut(line, []byte(":")); ok && strings.EqualFold(string(name), "Content-Length") {
			length, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
}

// oneRequest is one keyed POST to route on a new connection.
func oneRequest(addr, route string, seq *atomic.Int64) error {
	c, err := dial(addr)
	if err != nil {
		return err
	}
	defer c.nc.Close()
	return c.post(route, seq.Add(1))
}

// serveOrders serves the upstream on 127.0.0.1 for as long as the program
// runs: every request, read whole, is answered 201 with 90 bytes of JSON.
func serveOrders() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	body := `{"order":"ord_8f14e45fceea167a5a36dedd4bea2543","status":"created","total":"12.50"}`
	resp := []byte(fmt.Sprintf("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					_, length, err := readHead(br)
					if err != nil {
						return
					}
					if _, err := br.Discard(length); err != nil {
						return
					}
					if _, err := nc.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), nil
}

// redisServer is a redis-server this program started.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
}

// startRedis starts redis-server on a free port of 127.0.0.1, without
// persistence, its files in dir, and waits for it to answer PING.
func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (apt-get install redis-server), or run with -redis=false: %w", err)
	}
	port := rig.FreePort()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &redisServer{addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(r.addr) {
			return r, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING in 10 s", r.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisServer) stop() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
}

func ping(addr string) bool {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(time.Second))
	io.WriteString(nc, "PING\r\n")
	line, _ := bufio.NewReader(nc).ReadString('\n')
	return line == "+PONG\r\n"
}

// stats returns the median of xs, and its least and greatest.
func stats(xs []float64) (med, lo, hi float64) {
	return median(xs), slices.Min(xs), slices.Max(xs)
}

// median returns the median of xs (the mean of the middle two of an even
// number), sorting a copy.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
