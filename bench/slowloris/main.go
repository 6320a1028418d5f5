// Command slowloris runs the operator's slow-head fault test against the
// sluice binary and prints what it cost: connections that send a request
// head one byte at a time (one every -interval) until sluice answers 408,
// reconnecting for as long as the attack lasts, while a normal client sends
// a GET every 100 ms.
//
//	go run ./bench/slowloris [-conns 3000] [-interval 5s] [-attack 30s] [-after 30s] [-sluice BIN]
//
// It reports sluice's RSS (VmRSS from /proc) before the attack, with every
// slow connection open and none answered yet (the bytes per slow connection
// are the difference divided by their number), at its peak, and at times
// after the attack ended; the 408s and when they came; the normal client's
// failures and slowest request; and the lines and bytes sluice wrote to its
// error log and access log, with its client-fault counters. Everything
// listens on 127.0.0.1; sluice runs in a temp dir, killed on exit.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
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
)

type options struct {
	conns                  int
	interval, attack, wait time.Duration
	headerTimeout          time.Duration
	sluice                 string
	keep                   bool
}

func main() {
	var o options
	flag.IntVar(&o.conns, "conns", 3000, "slow connections held open at once")
	flag.DurationVar(&o.interval, "interval", 5*time.Second, "time between two bytes of a slow head")
	flag.DurationVar(&o.attack, "attack", 30*time.Second, "how long slow connections are reopened after their 408")
	flag.DurationVar(&o.wait, "after", 30*time.Second, "how long RSS is watched after the attack")
	flag.DurationVar(&o.headerTimeout, "header-timeout", 10*time.Second, "sluice's timeouts.header")
	flag.StringVar(&o.sluice, "sluice", "", "sluice `binary` (default: build ./cmd/sluice into the temp dir)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp dir (config and logs) and print its path")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "slowloris:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "slowloris")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "temp dir:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if err := raiseNoFile(uint64(2*o.conns + 1000)); err != nil {
		return err
	}
	bin := o.sluice
	if bin == "" {
		bin = filepath.Join(dir, "sluice")
		build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building sluice: %w", err)
		}
	}

	upstream, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(upstream, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	port, metricsPort := freePort(), freePort()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`listen: [{address: %q}]
timeouts: {header: %s}
access_log: {enabled: true, path: %q}
metrics: {address: "127.0.0.1:%d"}
routes: [{upstream: web}]
upstreams:
  web:
    servers: [{address: %q}]
`, addr, o.headerTimeout, filepath.Join(dir, "access.log"), metricsPort, upstream.Addr().String())
	cfgPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	errLog, err := os.Create(filepath.Join(dir, "error.log"))
	if err != nil {
		return err
	}
	defer errLog.Close()
	cmd := exec.Command(bin, "run", "-c", cfgPath)
	cmd.Stdout, cmd.Stderr = errLog, errLog
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	pid := cmd.Process.Pid
	if err := waitServing(ctx, addr); err != nil {
		return err
	}

	// Warm up as a proxy in service would be, then let it settle.
	for range 200 {
		if _, err := get(addr); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	time.Sleep(2 * time.Second)
	base := rssKB(pid)
	logBefore := lines(errLog.Name())

	var normal prober
	probeCtx, stopProbe := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() { normal.run(probeCtx, addr); close(probed) }()
	samples := &sampler{pid: pid}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { samples.run(sampleCtx); close(sampled) }()

	a := &attack{addr: addr, interval: o.interval}
	t0 := time.Now()
	attackCtx, endAttack := context.WithTimeout(ctx, o.attack)
	defer endAttack()
	a.open(attackCtx, o.conns)
	opened := time.Since(t0)
	// Every connection is open and none can have been answered before
	// the header timeout: the memory they hold.
	holdAt := min(o.headerTimeout-time.Second, 8*time.Second)
	sleepUntil(ctx, t0.Add(holdAt))
	held := rssKB(pid)
	heldConns := a.held.Load()
	<-attackCtx.Done()
	a.closeAll()
	attackEnd := time.Now()
	sleepUntil(ctx, attackEnd.Add(o.wait+time.Second)) // a sample past the last reported
	stopProbe()
	stopSampling()
	<-probed
	<-sampled
	if ctx.Err() != nil {
		return ctx.Err()
	}

	fmt.Printf("sluice %s, %d slow connections (a byte every %v), header timeout %v, attack %v\n",
		bin, o.conns, o.interval, o.headerTimeout, o.attack)
	fmt.Printf("opened in %v; %d held open at %v\n", opened.Round(time.Millisecond), heldConns, holdAt)
	fmt.Printf("RSS before: %d KiB; with the slow connections held: %d KiB (%.1f KiB per connection); peak %d KiB\n",
		base, held, float64(int64(held)-int64(base))/float64(max(heldConns, 1)), samples.peak())
	for _, after := range []time.Duration{0, 5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second, 60 * time.Second, 120 * time.Second, 150 * time.Second} {
		if after > o.wait {
			break
		}
		if kb, ok := samples.at(attackEnd.Add(after)); ok {
			fmt.Printf("RSS %v after the attack: %d KiB (%.2f× before)\n", after, kb, float64(kb)/float64(base))
		}
	}
	fmt.Printf("408s: %d, answered %s after the first byte; other ends: %d\n", a.answered.Load(), spread(a.waits), a.other.Load())
	fmt.Printf("normal client: %d requests, %d failed, slowest %v\n", normal.n, normal.failed, normal.slowest.Round(time.Millisecond))
	errs, acc := lines(errLog.Name()), lines(filepath.Join(dir, "access.log"))
	fmt.Printf("error log: %d lines, %d bytes during the run; access log: %d lines, %d bytes\n",
		errs.n-logBefore.n, errs.bytes-logBefore.bytes, acc.n, acc.bytes)
	if m, err := scrape(metricsPort, "sluice_client_faults_total"); err == nil {
		fmt.Print(m)
	}
	return nil
}

// attack holds the slow connections.
type attack struct {
	addr     string
	interval time.Duration
	mu       sync.Mutex
	conns    map[net.Conn]bool
	held     atomic.Int64 // connections open now
	answered atomic.Int64 // connections answered 408
	other    atomic.Int64 // connections ended otherwise
	waitMu   sync.Mutex
	waits    []time.Duration // from the first byte to the 408, of each
	wg       sync.WaitGroup
}

// head is what slow connections send, a byte at a time; none gets far.
const head = "GET /slow HTTP/1.1\r\nHost: slowloris\r\nUser-Agent: slowloris\r\n\r\n"

// open opens n slow connections, 200 at a time, each of which reconnects
// after its answer while ctx lasts.
func (a *attack) open(ctx context.Context, n int) {
	a.conns = make(map[net.Conn]bool)
	sem := make(chan struct{}, 200)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := a.dial(ctx)
			<-sem
			if nc != nil {
				a.wg.Add(1)
				go a.slow(ctx, nc)
			}
		}()
	}
	wg.Wait()
}

func (a *attack) dial(ctx context.Context) net.Conn {
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", a.addr)
	if err != nil {
		a.other.Add(1)
		return nil
	}
	a.mu.Lock()
	a.conns[nc] = true
	a.mu.Unlock()
	a.held.Add(1)
	return nc
}

// slow sends a byte every interval until the proxy answers, then opens a
// new connection while ctx lasts.
func (a *attack) slow(ctx context.Context, nc net.Conn) {
	defer a.wg.Done()
	for nc != nil {
		start := time.Now()
		answered := make(chan bool, 1)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReaderSize(nc, 512), nil)
			answered <- err == nil && resp.StatusCode == 408
		}()
		t := time.NewTicker(a.interval)
		var got bool
		i := 0
	send:
		for {
			nc.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := nc.Write([]byte{head[i%len(head)]}); err != nil {
				got = <-answered
				break
			}
			i++
			select {
			case got = <-answered:
				break send
			case <-t.C:
			}
		}
		t.Stop()
		wait := time.Since(start)
		a.forget(nc)
		nc.Close()
		if got {
			a.answered.Add(1)
			a.waitMu.Lock()
			a.waits = append(a.waits, wait)
			a.waitMu.Unlock()
		} else if ctx.Err() == nil {
			a.other.Add(1)
		}
		nc = nil
		if ctx.Err() == nil {
			nc = a.dial(ctx)
		}
	}
}

func (a *attack) forget(nc net.Conn) {
	a.mu.Lock()
	if a.conns[nc] {
		delete(a.conns, nc)
		a.held.Add(-1)
	}
	a.mu.Unlock()
}

func (a *attack) closeAll() {
	a.mu.Lock()
	for nc := range a.conns {
		nc.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// spread prints the least, median, 99th percentile and largest of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	slices.Sort(ds)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("%v (least), %v (median), %v (p99), %v (most)",
		r(ds[0]), r(ds[len(ds)/2]), r(ds[len(ds)*99/100]), r(ds[len(ds)-1]))
}

// prober is the normal client: a GET on a new connection every 100 ms.
type prober struct {
	n, failed int
	slowest   time.Duration
}

func (p *prober) run(ctx context.Context, addr string) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		code, err := get(addr)
		p.n++
		if err != nil || code != 200 {
			p.failed++
		}
		p.slowest = max(p.slowest, time.Since(start))
	}
}

func get(addr string) (int, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(nc, "GET / HTTP/1.1\r\nHost: normal\r\nConnection: close\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// sampler reads sluice's RSS every 500 ms.
type sampler struct {
	pid int
	mu  sync.Mutex
	t   []time.Time
	kb  []uint64
}

func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		kb := rssKB(s.pid)
		s.mu.Lock()
		s.t, s.kb = append(s.t, time.Now()), append(s.kb, kb)
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) peak() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Max(s.kb)
}

// at returns the first sample taken at or after t.
func (s *sampler) at(t time.Time) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, st := range s.t {
		if !st.Before(t) {
			return s.kb[i], true
		}
	}
	return 0, false
}

func rssKB(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

type count struct{ n, bytes int }

func lines(path string) count {
	b, _ := os.ReadFile(path)
	return count{strings.Count(string(b), "\n"), len(b)}
}

func scrape(port int, prefix string) (string, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) || strings.HasPrefix(sc.Text(), "sluice_requests_total") {
			fmt.Fprintln(&b, sc.Text())
		}
	}
	return b.String(), sc.Err()
}

func waitServing(ctx context.Context, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, err := get(addr); err == nil && code == 200 {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("sluice does not answer on %s: %d %v", addr, code, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(t)):
	}
}

// raiseNoFile raises the soft RLIMIT_NOFILE to want (within the hard
// limit); sluice, started afterwards, inherits it.
func raiseNoFile(want uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= want {
		return nil
	}
	if lim.Max < want {
		return errors.New("RLIMIT_NOFILE's hard limit is below " + strconv.FormatUint(want, 10) + ": lower -conns")
	}
	lim.Cur = want
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}
