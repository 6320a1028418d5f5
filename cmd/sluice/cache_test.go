//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/redistest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// objectBody is what the test origin answers for object n: 64 KiB that
// differ from one object to the next, so that any mix-up shows.
func objectBody(n int) []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte('a' + (i*7+n)%26)
	}
	copy(b, fmt.Sprintf("object %d;", n))
	return b
}

// cacheOrigin serves /object/N (cacheable for an hour, tagged with its
// parity) and counts the requests it gets.
func cacheOrigin(t *testing.T) (addr string, requests *int64, mu *sync.Mutex) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	var m sync.Mutex
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.Lock()
		n++
		m.Unlock()
		id, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/object/"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Surrogate-Key", "objects parity-"+strconv.Itoa(id%2))
		w.Write(objectBody(id))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), &n, &m
}

// freePort returns a port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// runCaching runs the binary with the config file and waits until addr
// answers.
func runCaching(t *testing.T, bin, file, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "run", "-c", file)
	var log proxytest.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("sluice's log:\n%s", log.String())
		}
	})
	wait.For(t, "sluice listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return cmd
}

// fetch gets /object/n through the proxy and checks its body.
func fetch(t testing.TB, client *http.Client, addr string, n int) (cacheStatus string, err error) {
	resp, err := client.Get(fmt.Sprintf("http://%s/object/%d", addr, n))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 || !bytes.Equal(body, objectBody(n)) {
		return "", fmt.Errorf("/object/%d: %d, %d bytes that are not the origin's", n, resp.StatusCode, len(body))
	}
	return resp.Header.Get("Cache-Status"), nil
}

// rssOf returns a process's resident set size.
func rssOf(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestCacheRun runs sluice with a 64 MiB memory store in front of an
// origin: fed 1 GiB of distinct objects (16,384 of 64 KiB, by 8 clients),
// its resident memory stays within 80 MiB of what it was before; a
// repeated request is a hit; a purge by tag through the admin API removes
// the objects it tags; a reload that changes the store's size keeps what
// it holds.
func TestCacheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB through a sluice process")
	}
	dir := t.TempDir()
	bin := buildSluice(t, dir, "sluice", "test")
	origin, requests, mu := cacheOrigin(t)
	addr, admin := freePort(t), freePort(t)
	file := filepath.Join(dir, "sluice.yaml")
	write := func(size string) {
		cfg := fmt.Sprintf("listen: [{address: %q}]\naccess_log: {enabled: false}\nadmin: {address: %q}\n"+
			"routes:\n  - {upstream: origin, cache: {}}\ncache:\n  stores:\n    default: {memory: %s}\n"+
			"upstreams:\n  origin:\n    servers: [{address: %q}]\n", addr, admin, size, origin)
		if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("64MiB")
	cmd := runCaching(t, bin, file, addr)
	pid := cmd.Process.Pid
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	base := rssOf(pid)
	peak := base
	var pmu sync.Mutex
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range next {
				if _, err := fetch(t, client, addr, n); err != nil {
					t.Error(err)
				}
				if n%64 == 0 {
					r := rssOf(pid)
					pmu.Lock()
					peak = max(peak, r)
					pmu.Unlock()
				}
			}
		}()
	}
	t0 := time.Now()
	for n := 0; n < 16384; n++ {
		next <- n
	}
	close(next)
	wg.Wait()
	t.Logf("RSS before %d MiB, at most %d MiB while fed 1 GiB (%+d MiB) in %v", base>>20, peak>>20, (peak-base)>>20, time.Since(t0))
	if peak-base > 80<<20 {
		t.Errorf("RSS grew by %d MiB, want at most 80", (peak-base)>>20)
	}

	// An object asked for twice is stored (W-TinyLFU may not admit one
	// asked for once into a full store: a scan does not flush it): a hit.
	fetch(t, client, addr, 16383)
	fetch(t, client, addr, 16383)
	if cs, err := fetch(t, client, addr, 16383); err != nil || !strings.Contains(cs, "hit") {
		t.Fatalf("a repeated request: %q %v", cs, err)
	}
	// Purge the odd objects by tag: the last (odd) one goes.
	resp, err := http.Post("http://"+admin+"/api/cache/purge", "application/json", strings.NewReader(`{"tags": ["parity-1"]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"purged":`) || strings.Contains(string(body), `"purged":0`) {
		t.Fatalf("purge: %d %s", resp.StatusCode, body)
	}
	if cs, err := fetch(t, client, addr, 16383); err != nil || strings.Contains(cs, "hit") {
		t.Fatalf("after the purge: %q %v", cs, err)
	}
	// A reload that resizes the store keeps what it holds.
	if cs, err := fetch(t, client, addr, 16382); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(cs, "hit") {
		fetch(t, client, addr, 16382) // stored now
	}
	write("96MiB")
	mu.Lock()
	before := *requests
	mu.Unlock()
	syscall.Kill(pid, syscall.SIGHUP)
	wait.For(t, "the reload", func() bool {
		resp, err := http.Get("http://" + admin + "/api/upstreams")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), fmt.Sprintf(`"capacity": %d`, 96<<20))
	})
	if cs, err := fetch(t, client, addr, 16382); err != nil || !strings.Contains(cs, "hit") {
		t.Errorf("after the reload: %q %v", cs, err)
	}
	mu.Lock()
	after := *requests
	mu.Unlock()
	if after != before {
		t.Errorf("the origin got %d requests after the reload, want none", after-before)
	}
}

// TestCacheDiskKill9 runs sluice with a disk store, fetching objects
// through it (each miss written to the store) and killing it with SIGKILL
// in the middle, ten times; after each restart, every object it serves,
// from the disk or the origin, is byte for byte the origin's.
func TestCacheDiskKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("ten sluice processes")
	}
	dir := t.TempDir()
	bin := buildSluice(t, dir, "sluice", "test")
	origin, _, _ := cacheOrigin(t)
	addr := freePort(t)
	file := filepath.Join(dir, "sluice.yaml")
	cfg := fmt.Sprintf("listen: [{address: %q}]\naccess_log: {enabled: false}\n"+
		"routes:\n  - {upstream: origin, cache: {store: disk}}\ncache:\n  stores:\n    disk: {disk: {path: %q, size: 64MiB}}\n"+
		"upstreams:\n  origin:\n    servers: [{address: %q}]\n", addr, filepath.Join(dir, "store"), origin)
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	hits := 0
	for round := 0; round < 10; round++ {
		cmd := exec.Command(bin, "run", "-c", file)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wait.For(t, "sluice listening", func() bool {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 10 * time.Second}
		// Every object served after the restart is whole.
		for n := 0; n < 64; n++ {
			cs, err := fetch(t, client, addr, n)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if strings.Contains(cs, "hit") {
				hits++
			}
		}
		// Writes in flight when the kill comes: new objects fetched by 8
		// clients, killed after a random share of them.
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var done atomic.Int64
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for n := 64 + w; ctx.Err() == nil && n < 1024; n += 8 {
					fetch(t, client, addr, n)
					done.Add(1)
				}
			}(w)
		}
		// The kill comes after a share of the fetches that grows with the
		// round, with eight more in flight.
		wait.For(t, "fetches under way", func() bool { return done.Load() >= int64(16+round*40) })
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		cancel()
		wg.Wait()
		client.CloseIdleConnections()
	}
	if hits == 0 {
		t.Error("no object was ever served from the disk after a restart")
	}
	t.Logf("%d of %d requests after restarts served from the disk, all whole", hits, 640)
}

// TestCacheFleetPurge runs two sluice processes on one redis-server, each
// caching the same origin: a purge by tag at one admin API reaches the
// other's store through Redis, so that both fetch the tagged objects
// again and keep the others. Their metrics count the hits and the purge.
func TestCacheFleetPurge(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	bin := buildSluice(t, dir, "sluice", "test")
	origin, requests, mu := cacheOrigin(t)
	type instance struct{ addr, admin string }
	var fleet [2]instance
	for i := range fleet {
		fleet[i] = instance{freePort(t), freePort(t)}
		file := filepath.Join(dir, fmt.Sprintf("sluice%d.yaml", i))
		cfg := fmt.Sprintf("listen: [{address: %q}]\naccess_log: {enabled: false}\nadmin: {address: %q}\n"+
			"routes:\n  - {upstream: origin, cache: {}}\ncache:\n  stores:\n    default: {memory: 16MiB}\n"+
			"redis: {address: %q}\nupstreams:\n  origin:\n    servers: [{address: %q}]\n", fleet[i].addr, fleet[i].admin, srv.Addr, origin)
		if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		runCaching(t, bin, file, fleet[i].addr)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	originRequests := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return *requests
	}
	// Objects 1 (parity-1) and 2 (parity-0), each fetched twice through
	// each instance: a miss, then a hit.
	for _, in := range fleet {
		for _, n := range []int{1, 2} {
			for try := 0; try < 2; try++ {
				cs, err := fetch(t, client, in.addr, n)
				if err != nil {
					t.Fatal(err)
				}
				if try == 1 && !strings.HasPrefix(cs, "sluice; hit") {
					t.Fatalf("%s, object %d asked for again: Cache-Status %q, want a hit", in.addr, n, cs)
				}
			}
		}
	}
	if n := originRequests(); n != 4 {
		t.Fatalf("the origin got %d requests, want 4 (two objects, two instances)", n)
	}

	resp, err := http.Post("http://"+fleet[0].admin+"/api/cache/purge", "application/json", strings.NewReader(`{"tags": ["parity-1"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct{ Purged int }
	err = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || answer.Purged != 1 {
		t.Fatalf("purge at the first instance: %d, %+v, %v; want 200 and 1 purged", resp.StatusCode, answer, err)
	}
	// The other instance applies it once the message arrives: its
	// metrics say so before any request can tell.
	wait.For(t, "the purge applied by the second instance", func() bool {
		return metric(t, fleet[1].admin, `sluice_cache_purged_total{store="default"}`) == 1
	})
	for _, in := range fleet {
		if cs, err := fetch(t, client, in.addr, 1); err != nil || !strings.Contains(cs, "fwd=uri-miss") {
			t.Errorf("%s, the purged object: Cache-Status %q, %v; want a miss", in.addr, cs, err)
		}
		if cs, err := fetch(t, client, in.addr, 2); err != nil || !strings.HasPrefix(cs, "sluice; hit") {
			t.Errorf("%s, the object not purged: Cache-Status %q, %v; want a hit", in.addr, cs, err)
		}
		if hits := metric(t, in.admin, `sluice_cache_total{result="hit",store="default"}`); hits != 3 {
			t.Errorf("%s counts %v hits, want 3", in.addr, hits)
		}
	}
	if n := originRequests(); n != 6 {
		t.Errorf("the origin got %d requests, want 6 (the purged object fetched again by each)", n)
	}
}

// metric returns the value of one sample of an admin listener's /metrics,
// the series written as Prometheus writes it; -1 when it is missing.
func metric(t *testing.T, admin, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return -1
}
