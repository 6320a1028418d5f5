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
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/bench/internal/rig"
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
	dir, remove, err := rig.TempDir("slowloris", o.keep)
	if err != nil {
		return err
	}
	defer remove()
	if err := rig.RaiseNoFile(uint64(2*o.conns+1000), "-conns"); err != nil {
		return err
	}
	bin, err := rig.Binary(o.sluice, dir)
	if err != nil {
		return err
	}

	upstream, err := rig.ServeOK()
	if err != nil {
		return err
	}
	port, metricsPort := rig.FreePort(), rig.FreePort()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`listen: [{address: %q}]
timeouts: {header: %s}
access_log: {enabled: true, path: %q}
metrics: {address: "127.0.0.1:%d"}
routes: [{upstream: web}]
upstreams:
  web:
    servers: [{address: %q}]
`, addr, o.headerTimeout, filepath.Join(dir, "access.log"), metricsPort, upstream)
	sl, err := rig.Start(bin, dir, addr, cfg)
	if err != nil {
		return err
	}
	defer sl.Stop()
	if err := sl.WaitServing(ctx, func() error { return answered(addr) }); err != nil {
		return err
	}

	// Warm up as a proxy in service would be, then let it settle.
	base, err := sl.WarmUp(func() error { _, err := get(addr); return err })
	if err != nil {
		return err
	}
	logBefore := lines(sl.Log)

	stopProbe := rig.Probe(ctx, func() error { return answered(addr) })
	samples := &sampler{pid: sl.Pid}
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
	rig.SleepUntil(ctx, t0.Add(holdAt))
	held := rig.RSSKB(sl.Pid)
	heldConns := a.held.Load()
	<-attackCtx.Done()
	a.closeAll()
	attackEnd := time.Now()
	rig.SleepUntil(ctx, attackEnd.Add(o.wait+time.Second)) // a sample past the last reported
	stopSampling()
	normal := stopProbe()
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
	fmt.Printf("normal client: %d requests, %d failed, slowest %v\n", normal.N, normal.Failed, normal.Slowest.Round(time.Millisecond))
	errs, acc := lines(sl.Log), lines(filepath.Join(dir, "access.log"))
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

// answered is an error unless a GET on a new connection to addr is answered
// 200: what the normal client and the wait for sluice count as served.
func answered(addr string) error {
	code, err := get(addr)
	if err == nil && code == 200 {
		return nil
	}
	return fmt.Errorf("%d %v", code, err)
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
		kb := rig.RSSKB(s.pid)
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
