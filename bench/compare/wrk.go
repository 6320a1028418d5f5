package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// wrkDone is appended to every wrk script: at the end of a run it
// prints exact counts and latency percentiles (in microseconds) on one
// line, so that nothing is parsed from wrk's rounded human output.
const wrkDone = `
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK-RESULT %d %d %d %d %d %d %d %d %d %d\n",
    summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
`

// postSetup makes wrk send a 4 KiB POST body.
const postSetup = `wrk.method = "POST"
wrk.body = string.rep("x", 4096)
wrk.headers["Content-Type"] = "application/octet-stream"
`

// wrkResult is one wrk run, as its done hook reports it.
type wrkResult struct {
	duration time.Duration
	requests int64
	bytes    int64
	sockErrs int64 // connect, read, write and timeout errors
	status   int64 // responses with status >= 400 (wrk's "Non-2xx or 3xx")
	p50, p99 time.Duration
}

// errNoResult means wrk exited without printing its result line.
var errNoResult = errors.New("wrk printed no result line")

// writeWrkScript writes the Lua script of a scenario into dir.
func writeWrkScript(dir string, sc scenario) (string, error) {
	path := filepath.Join(dir, "wrk-"+sc.name+".lua")
	return path, os.WriteFile(path, []byte("-- written by bench/compare\n"+sc.lua+wrkDone), 0o644)
}

// loadResult is one run of the load: wrk's figures; for bench/tlsload
// what its handshakes negotiated, for h2load what its first connection
// did, and the rest of h2load's summary.
type loadResult struct {
	wrkResult
	tls negotiated
	h2  h2Result
}

// runLoad runs the scenario's load against 127.0.0.1:port for d: wrk,
// bench/tlsload for a scenario of TLS handshakes, or h2load for HTTP/2.
func (b *bench) runLoad(ctx context.Context, sc scenario, port int, d time.Duration) (loadResult, error) {
	switch {
	case sc.handshakes:
		return b.runTLSLoad(ctx, sc, port, d)
	case sc.h2:
		return b.runH2load(ctx, sc, port, d)
	case sc.h3:
		return b.runH3load(ctx, sc, port, d)
	}
	res, err := b.runWrk(ctx, sc, port, d)
	return loadResult{wrkResult: res}, err
}

// wholeSeconds rounds d up to whole seconds, wrk's unit.
func wholeSeconds(d time.Duration) int { return max(1, int((d+time.Second-1)/time.Second)) }

// runWrk runs wrk, pinned to the load CPU, against 127.0.0.1:port for
// d (rounded up to whole seconds, wrk's unit), over TLS in a TLS scenario.
func (b *bench) runWrk(ctx context.Context, sc scenario, port int, d time.Duration) (wrkResult, error) {
	secs := wholeSeconds(d)
	args := []string{"-c", loadCPU, b.tools["wrk"],
		"-t", strconv.Itoa(b.opt.threads), "-c", strconv.Itoa(b.opt.conns),
		"-d", strconv.Itoa(secs) + "s", "--latency", "-s", b.scripts[sc.name]}
	if sc.header != "" {
		args = append(args, "-H", sc.header)
	}
	scheme := "http"
	if sc.tls {
		scheme = "https"
	}
	args = append(args, fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, port, sc.path))
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "taskset", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if b.opt.verbose {
		fmt.Fprintf(os.Stderr, "%s", out)
	}
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseWrk(out)
}

// parseWrk finds the WRK-RESULT line of wrkDone in wrk's output.
func parseWrk(out []byte) (wrkResult, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 11 || f[0] != "WRK-RESULT" {
			continue
		}
		var n [10]int64
		for i := range n {
			v, err := strconv.ParseFloat(f[i+1], 64)
			if err != nil {
				return wrkResult{}, fmt.Errorf("wrk result %q: %w", sc.Text(), err)
			}
			n[i] = int64(v)
		}
		return wrkResult{
			duration: time.Duration(n[0]) * time.Microsecond,
			requests: n[1],
			bytes:    n[2],
			sockErrs: n[3] + n[4] + n[5] + n[7],
			status:   n[6],
			p50:      time.Duration(n[8]) * time.Microsecond,
			p99:      time.Duration(n[9]) * time.Microsecond,
		}, nil
	}
	return wrkResult{}, errNoResult
}

// runTLSLoad runs bench/tlsload, pinned to the load CPU with GOMAXPROCS=1
// (one thread, as wrk's), against 127.0.0.1:port for d: as many clients as
// wrk has connections, each a new TLS connection per request.
func (b *bench) runTLSLoad(ctx context.Context, sc scenario, port int, d time.Duration) (loadResult, error) {
	if b.tools["tlsload"] == "" {
		return loadResult{}, errors.New("bench/tlsload was not built")
	}
	secs := wholeSeconds(d)
	args := []string{"-c", loadCPU, b.tools["tlsload"],
		"-addr", fmt.Sprintf("127.0.0.1:%d", port), "-path", sc.path, "-servername", tlsName,
		"-c", strconv.Itoa(b.opt.conns), "-d", strconv.Itoa(secs) + "s"}
	if sc.resume {
		args = append(args, "-resume")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "taskset", args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if b.opt.verbose {
		fmt.Fprintf(os.Stderr, "%s", out)
	}
	if err != nil {
		return loadResult{}, fmt.Errorf("tlsload: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	res, err := parseWrk(out)
	if err != nil {
		return loadResult{}, err
	}
	n, err := parseTLSStates(out)
	return loadResult{wrkResult: res, tls: n}, err
}
