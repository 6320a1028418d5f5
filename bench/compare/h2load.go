package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// h2Result is what h2load's summary says of a run beyond the figures it
// shares with wrk. h2load gives no latency percentiles: of the time for a
// request it prints the least, the most, the mean, the standard deviation
// and the share of requests within mean ± sd, and no more.
type h2Result struct {
	// done is every request that completed; succeeded those h2load
	// counts as a success, a 2xx or 3xx status; failed the others,
	// errored included: those without a status (a reset stream, a
	// connection error or timeout).
	done, succeeded, failed, errored, timeout int64
	codes                                     [4]int64 // responses by status class: 2xx, 3xx, 4xx, 5xx
	reqMin, reqMax, reqMean, reqSD            time.Duration
	withinSDPct                               float64 // percent of requests within mean ± sd ("+/- sd")
}

// parseH2load reads h2load's (nghttp2 1.52) output:
//
//	TLS Protocol: TLSv1.3
//	Cipher: TLS_AES_128_GCM_SHA256
//	Server Temp Key: X25519 253 bits
//	Application protocol: h2
//	...
//	finished in 2.01s, 63925.50 req/s, 5.55MB/s
//	requests: 127851 total, 128011 started, 127851 done, 127851 succeeded, 0 failed, 0 errored, 0 timeout
//	status codes: 127851 2xx, 0 3xx, 0 4xx, 0 5xx
//	traffic: 11.10MB (11635225) total, 5.97MB (6264699) headers (space savings 50.51%), 2.93MB (3068424) data
//	                     min         max         mean         sd        +/- sd
//	time for request:      185us     34.34ms      1.77ms      1.75ms    91.28%
//
// into wrk's figures: requests are those done; socket errors those
// errored; status errors every response that was not a 2xx (h2load's
// failed but errored, and its 3xx, which it counts as successes). p50
// and p99 are -1: not reported. The TLS lines come from the first
// connection's handshake; they are missing when no handshake completed.
// A summary line missing or malformed is an error.
func parseH2load(out []byte) (loadResult, error) {
	var (
		res                        loadResult
		h                          = &res.h2
		rps                        float64
		finished                   time.Duration
		gotFinished, gotTraffic    bool
		requests, codes, reqTiming map[string]string
	)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "finished in "); ok {
			// "2.01s, 63925.50 req/s, 5.55MB/s"
			f := strings.Split(rest, ", ")
			if len(f) < 2 || !strings.HasSuffix(f[1], " req/s") {
				return res, fmt.Errorf("h2load: %q: no req/s", line)
			}
			var err1, err2 error
			finished, err1 = time.ParseDuration(f[0])
			rps, err2 = strconv.ParseFloat(strings.TrimSuffix(f[1], " req/s"), 64)
			if err := errors.Join(err1, err2); err != nil {
				return res, fmt.Errorf("h2load: %q: %w", line, err)
			}
			gotFinished = true
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "TLS Protocol":
			res.tls.protocol = v
		case "Cipher":
			res.tls.cipher = v
		case "Server Temp Key":
			res.tls.group, _, _ = strings.Cut(v, " ")
		case "Application protocol":
			res.tls.alpn = v
		case "requests":
			requests = countsByName(v)
		case "status codes":
			codes = countsByName(v)
		case "traffic":
			// "11.10MB (11635225) total, ...": the exact count is in brackets.
			total, _, _ := strings.Cut(v, ", ")
			f := strings.Fields(total)
			if len(f) != 3 || f[2] != "total" || !strings.HasPrefix(f[1], "(") || !strings.HasSuffix(f[1], ")") {
				return res, fmt.Errorf("h2load: traffic line %q", line)
			}
			n, err := strconv.ParseInt(strings.Trim(f[1], "()"), 10, 64)
			if err != nil {
				return res, fmt.Errorf("h2load: traffic line %q: %w", line, err)
			}
			res.bytes = n
			gotTraffic = true
		case "time for request":
			f := strings.Fields(v)
			if len(f) != 5 {
				return res, fmt.Errorf("h2load: time for request line %q", line)
			}
			reqTiming = map[string]string{"min": f[0], "max": f[1], "mean": f[2], "sd": f[3], "+/- sd": f[4]}
		}
	}
	if !gotFinished || !gotTraffic || requests == nil || codes == nil || reqTiming == nil {
		return res, errors.New("h2load printed no summary (finished, requests, status codes, traffic and time for request lines)")
	}
	var err error
	get := func(m map[string]string, key string) int64 {
		n, e := strconv.ParseInt(m[key], 10, 64)
		if e != nil || n < 0 {
			err = errors.Join(err, fmt.Errorf("h2load: %q: not a count: %q", key, m[key]))
		}
		return n
	}
	h.done, h.succeeded, h.failed = get(requests, "done"), get(requests, "succeeded"), get(requests, "failed")
	h.errored, h.timeout = get(requests, "errored"), get(requests, "timeout")
	for i, class := range []string{"2xx", "3xx", "4xx", "5xx"} {
		h.codes[i] = get(codes, class)
	}
	dur := func(key string) time.Duration {
		d, e := time.ParseDuration(reqTiming[key])
		if e != nil {
			err = errors.Join(err, fmt.Errorf("h2load: time for request: %s: %w", key, e))
		}
		return d
	}
	h.reqMin, h.reqMax, h.reqMean, h.reqSD = dur("min"), dur("max"), dur("mean"), dur("sd")
	pct, e := strconv.ParseFloat(strings.TrimSuffix(reqTiming["+/- sd"], "%"), 64)
	if e != nil {
		err = errors.Join(err, fmt.Errorf("h2load: time for request: +/- sd: %w", e))
	}
	h.withinSDPct = pct
	if err != nil {
		return res, err
	}
	res.requests = h.done
	res.sockErrs = h.errored
	res.status = h.failed - h.errored + h.codes[1]
	res.p50, res.p99 = -1, -1
	// h2load's req/s is the requests done but errored over the main
	// duration (-D), which "finished in" overstates: it is rounded to 10 ms
	// and counts the shutdown after the main duration. So the duration is
	// taken from req/s, which has five or more significant digits, while
	// there is one.
	res.duration = finished
	if ok := h.done - h.errored; rps > 0 && ok > 0 {
		res.duration = time.Duration(float64(ok) / rps * float64(time.Second))
	}
	return res, nil
}

// countsByName reads "127851 total, 128011 started, 127851 done" as
// {total: 127851, started: 128011, done: 127851}, the counts unparsed.
func countsByName(s string) map[string]string {
	m := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		if f := strings.Fields(part); len(f) == 2 {
			m[f[1]] = f[0]
		}
	}
	return m
}

// requireH2 says why a run of h2load does not measure HTTP/2: no
// handshake completed, or one settled on another protocol than h2 (an
// h2load offering h2 alone then speaks nothing, or HTTP/1.1 should ALPN
// not be answered), or no request completed.
func requireH2(res loadResult) error {
	switch {
	case res.tls.alpn == "" && res.tls.protocol == "":
		return errors.New("h2load: no TLS handshake completed (does the proxy offer h2 by ALPN?)")
	case res.tls.alpn != "h2":
		return fmt.Errorf("h2load: negotiated %q, not h2", res.tls.alpn)
	case res.h2.done == 0:
		return errors.New("h2load: no request completed")
	}
	return nil
}

// runH2load runs h2load, pinned to the load CPU (one thread, as wrk),
// against https://127.0.0.1:port for d (rounded up to whole seconds):
// -h2-conns connections of -h2-streams concurrent streams each, offering
// h2 alone by ALPN, so that a proxy that does not speak it fails the run
// rather than be measured over HTTP/1.1.
func (b *bench) runH2load(ctx context.Context, sc scenario, port int, d time.Duration) (loadResult, error) {
	if b.tools["h2load"] == "" {
		return loadResult{}, errors.New("no h2load (apt-get install -y nghttp2-client)")
	}
	secs := wholeSeconds(d)
	args := []string{"-c", loadCPU, b.tools["h2load"], "--npn-list=h2", "-t", "1",
		"-c", strconv.Itoa(b.opt.h2Conns), "-m", strconv.Itoa(b.opt.h2Streams),
		"-D", strconv.Itoa(secs) + "s", fmt.Sprintf("https://127.0.0.1:%d%s", port, sc.path)}
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
		return loadResult{}, fmt.Errorf("h2load: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	res, err := parseH2load(out)
	if err != nil {
		return res, err
	}
	return res, requireH2(res)
}

// requireH3 says why a run of bench/h3load does not measure HTTP/3: no
// handshake completed, one settled on another protocol, or no request
// completed.
func requireH3(res loadResult) error {
	switch {
	case res.tls.alpn == "" && res.tls.protocol == "":
		return errors.New("h3load: no QUIC handshake completed (does the proxy serve HTTP/3?)")
	case res.tls.alpn != "h3":
		return fmt.Errorf("h3load: negotiated %q, not h3", res.tls.alpn)
	case res.h2.done == 0:
		return errors.New("h3load: no request completed")
	}
	return nil
}

// runH3load runs bench/h3load, pinned to the load CPU, against
// https://127.0.0.1:port for d (rounded up to whole seconds), with
// h2load's connections and streams: its summary is h2load's.
func (b *bench) runH3load(ctx context.Context, sc scenario, port int, d time.Duration) (loadResult, error) {
	if b.tools["h3load"] == "" {
		return loadResult{}, errors.New("no bench/h3load (it is built with go)")
	}
	secs := wholeSeconds(d)
	args := []string{"-c", loadCPU, b.tools["h3load"],
		"-c", strconv.Itoa(b.opt.h2Conns), "-m", strconv.Itoa(b.opt.h2Streams),
		"-D", strconv.Itoa(secs) + "s", "-sni", tlsName, fmt.Sprintf("https://127.0.0.1:%d%s", port, sc.path)}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "taskset", args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if b.opt.verbose {
		fmt.Fprintf(os.Stderr, "%s%s", out, stderr.Bytes())
	}
	if err != nil {
		return loadResult{}, fmt.Errorf("h3load: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	res, err := parseH2load(out)
	if err != nil {
		return res, err
	}
	return res, requireH3(res)
}
