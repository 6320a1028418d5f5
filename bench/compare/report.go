package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// environment is what the report says about the machine and the run.
type environment struct {
	date      time.Time
	cpus      int
	model     string
	kernel    string
	loadStart string
	loadEnd   string
	versions  [][3]string // tool, version line, a remark
	elapsed   time.Duration
}

func (b *bench) environment() environment {
	e := environment{
		date:      time.Now(),
		cpus:      numCPU(),
		model:     cpuModel(),
		kernel:    strings.TrimSpace(readString("/proc/sys/kernel/osrelease")),
		loadStart: loadAvg(),
	}
	add := func(tool string, argv ...string) {
		out, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		line := firstLine(strings.TrimSpace(string(out)))
		if line == "" {
			line = "?"
		}
		e.versions = append(e.versions, [3]string{tool, line})
	}
	for _, p := range b.targets {
		switch {
		case p.name == "sluice-reuse", p.name == "sluice-dial":
		case p.name == "sluice-b":
			add("sluice-b", b.tools["sluice-b"], "version")
			e.versions[len(e.versions)-1][2] = b.opt.sluiceB
		case p.name == "go-relay":
			e.versions = append(e.versions, [3]string{"go-relay", "bench/relay", "built by this run with the same toolchain"})
		case p.name == "sluice":
			add("sluice", b.tools["sluice"], "version")
			e.versions[len(e.versions)-1][2] = b.built
		case p.tool != "" && p.tool != "nginx":
			add(p.name, append([]string{b.tools[p.tool]}, p.version...)...)
		}
	}
	add("nginx", b.tools["nginx"], "-v")
	add("wrk", b.tools["wrk"], "-v")
	if b.tools["h2load"] != "" {
		add("h2load", b.tools["h2load"], "--version")
		e.versions[len(e.versions)-1][2] = "the load of the HTTP/2 scenarios"
	}
	if b.tls != nil && b.tools["openssl"] != "" {
		add("openssl", b.tools["openssl"], "version")
		e.versions[len(e.versions)-1][2] = "wrk's TLS library, and the check of what each proxy negotiates"
	}
	if b.tools["tlsload"] != "" {
		e.versions = append(e.versions, [3]string{"tlsload", "bench/tlsload", "built by this run with the same toolchain: the load of tls-close and tls-resume"})
	}
	if gobin, err := exec.LookPath("go"); err == nil {
		add("go", gobin, "version")
	} else {
		e.versions = append(e.versions, [3]string{"go", runtime.Version(), "the toolchain that built this program"})
	}
	return e
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// numCPU counts the processors in /proc/cpuinfo, whatever this
// program's affinity.
func numCPU() int {
	n := 0
	for _, line := range strings.Split(readString("/proc/cpuinfo"), "\n") {
		if k, _, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "processor" {
			n++
		}
	}
	if n == 0 {
		n = runtime.NumCPU()
	}
	return n
}

func cpuModel() string {
	sc := bufio.NewScanner(strings.NewReader(readString("/proc/cpuinfo")))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func loadAvg() string {
	f := strings.Fields(readString("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// medianOf is the median over the samples of f.
func medianOf(ss []sample, f func(sample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return median(xs)
}

// pairedRatio is the median over rounds of f(a's sample) / f(b's sample
// of the same round): a ratio between two targets measured moments apart,
// which drift in the machine's speed moves far less than a ratio of
// medians. Rounds where either has no sample are left out.
func pairedRatio(a, b []sample, f func(sample) float64) float64 {
	var xs []float64
	for _, s := range a {
		for _, t := range b {
			if t.round == s.round && f(t) != 0 {
				xs = append(xs, f(s)/f(t))
			}
		}
	}
	return median(xs)
}

func cpuPerRequest(s sample) float64 { return s.cpu / float64(max(s.requests, 1)) }
func reqPerSecond(s sample) float64  { return rate(s.requests, s.duration) }

// loadStats is a loadRow reduced to the reported figures: each the
// median over the rounds, except errors, which are summed.
type loadStats struct {
	rps, p50, p99, mbps float64
	cpuPer100k, cpuPct  float64 // NaN for direct
	others0, cpu1       float64
	spread              float64 // (max-min)/median of req/s over the rounds
	errors              int64
	upstreamPer1k       float64 // NaN unless counted in every round
}

func (r loadRow) stats() loadStats {
	ss := r.samples
	st := loadStats{
		rps:     medianOf(ss, func(s sample) float64 { return rate(s.requests, s.duration) }),
		p50:     medianOf(ss, func(s sample) float64 { return float64(s.p50) }),
		p99:     medianOf(ss, func(s sample) float64 { return float64(s.p99) }),
		mbps:    medianOf(ss, func(s sample) float64 { return rate(s.bytes, s.duration) / 1e6 }),
		others0: medianOf(ss, func(s sample) float64 { return s.others0() }),
		cpu1:    medianOf(ss, func(s sample) float64 { return s.cpu1 }),
	}
	st.upstreamPer1k = math.NaN()
	if !slices.ContainsFunc(ss, func(s sample) bool { return s.upConns < 0 }) {
		st.upstreamPer1k = medianOf(ss, sample.upstreamPer1k)
	}
	st.cpuPer100k, st.cpuPct = math.NaN(), math.NaN()
	if len(ss) > 0 && ss[0].cpu >= 0 {
		st.cpuPer100k = medianOf(ss, func(s sample) float64 { return s.cpu / float64(max(s.requests, 1)) * 1e5 })
		st.cpuPct = medianOf(ss, func(s sample) float64 { return s.cpu / s.wall.Seconds() })
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		v := rate(s.requests, s.duration)
		lo, hi = min(lo, v), max(hi, v)
		st.errors += s.sockErrs + s.status
	}
	st.spread = (hi - lo) / st.rps
	return st
}

func (r idleRow) bytesPerConn() float64 {
	xs := make([]float64, len(r.samples))
	for i, s := range r.samples {
		xs[i] = (float64(s.afterKB) - float64(s.beforeKB)) * 1024 / float64(max(s.held, 1))
	}
	return median(xs)
}

func (b *bench) report(w io.Writer, e environment, loads []loadRow, idles []idleRow) {
	fmt.Fprintf(w, "## sluice vs nginx, HAProxy, Caddy — %s\n\n", e.date.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "Machine: %d CPUs, %s, Linux %s; load average %s at the start, %s at the end.\n\n",
		e.cpus, e.model, e.kernel, e.loadStart, e.loadEnd)
	for _, v := range e.versions {
		fmt.Fprintf(w, "- %s: `%s`", v[0], v[1])
		if v[2] != "" {
			fmt.Fprintf(w, " — %s", v[2])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nSetup: each proxy one worker (GOMAXPROCS=1 / worker_processes 1 / nbthread 1) pinned to CPU %s; "+
		"wrk (%d thread, %d connections) and the upstream (one nginx worker) pinned to CPU %s. "+
		"%d round(s) × %s per scenario after a %s warm-up (idle connections: %d round(s), a fresh process each), "+
		"targets alternated within each round; figures are medians over the rounds, errors are summed. "+
		"RLIMIT_NOFILE %d. Run took %s.\n",
		proxyCPU, b.opt.threads, b.opt.conns, loadCPU, b.opt.rounds, b.opt.duration, b.opt.warmup, min(b.opt.rounds, idleRounds),
		b.noFile, e.elapsed.Round(time.Second))
	if b.wants(func(sc scenario) bool { return sc.tls && !sc.multiplexed() }) {
		fmt.Fprintf(w, "\nTLS scenarios: every proxy serves the same certificate, made for the run (ECDSA P-256, signed by a CA made for the run), "+
			"TLS 1.3 only, with the cipher suite Go's servers choose, TLS_AES_128_GCM_SHA256 (nginx and HAProxy are set to it), "+
			"and session tickets as each issues them by default; the upstream stays plain HTTP. "+
			"wrk (OpenSSL) loads tls-small and tls-1m over keep-alive connections. "+
			"bench/tlsload (Go's crypto/tls, %d clients, one thread on CPU %s) makes a new connection per request: "+
			"in tls-close every handshake is full, in tls-resume every one after a client's first resumes the session its last one got "+
			"(its latencies count from the dial, the handshake included). "+
			"tls-idle's connections are this program's (crypto/tls). All the clients offer X25519 alone, as OpenSSL 3.0's client does, and no ALPN.\n",
			b.opt.conns, loadCPU)
	}
	if b.wants(func(sc scenario) bool { return sc.h2 }) {
		fmt.Fprintf(w, "\nHTTP/2 scenarios: h2load (one thread on CPU %s, %d connections × %d concurrent streams) offers ALPN h2 alone, over TLS 1.3 "+
			"with the TLS scenarios' certificate (made for the run, ECDSA P-256) and cipher suite (TLS_AES_128_GCM_SHA256; nginx and HAProxy are set to it); "+
			"the TLS table shows what its first connection negotiated in every round. Every proxy serves h2 and HTTP/1.1 on its TLS listener "+
			"(nginx `listen … ssl http2`, HAProxy `alpn h2,http/1.1`, Caddy and sluice by default), the upstream stays HTTP/1.1. "+
			"A round whose handshake did not settle on h2 fails the row. h2load reports no latency percentiles: "+
			"its rows have no p50 or p99, and the HTTP/2 table gives what it does report of the time for a request. "+
			"Errors are every request that got no 2xx: h2load's failed (non-2xx/3xx statuses, and the errored: resets, connection errors, timeouts) and its 3xx.\n",
			loadCPU, b.opt.h2Conns, b.opt.h2Streams)
	}
	if b.wants(func(sc scenario) bool { return sc.h3 }) {
		fmt.Fprintf(w, "\nHTTP/3 scenarios: bench/h3load (quic-go's HTTP/3 client, GOMAXPROCS=1 on CPU %s, %d QUIC connections × %d requests in flight, "+
			"each connection on a UDP socket of its own) prints h2load's summary; the certificate is the TLS scenarios'. "+
			"sluice and Caddy serve HTTP/3 on a UDP socket at their TLS listener's port beside h2 and HTTP/1.1 (sluice `protocols: [h3, h2, http/1.1]`, "+
			"Caddy `protocols h1 h2 h3`), both on quic-go; nginx 1.22 and HAProxy 2.6 as Debian builds them have no QUIC and sit out. "+
			"Errors are counted as for HTTP/2.\n",
			loadCPU, b.opt.h2Conns, b.opt.h2Streams)
	}
	if len(b.notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range b.notes {
			fmt.Fprintf(w, "- Note: %s\n", n)
		}
	}
	if len(loads) > 0 {
		b.loadTable(w, loads)
		b.tlsTable(w, loads)
		b.multiplexedTable(w, loads, false)
		b.multiplexedTable(w, loads, true)
	}
	for _, name := range b.opt.scenarios {
		var rows []idleRow
		for _, r := range idles {
			if r.sc.name == name {
				rows = append(rows, r)
			}
		}
		if len(rows) > 0 {
			b.idleTable(w, rows)
		}
	}
	if vs := verdicts(loads, idles); len(vs) > 0 {
		b.targetTable(w, vs)
	}
}

func (b *bench) loadTable(w io.Writer, rows []loadRow) {
	fmt.Fprintf(w, "\n### Load\n\n")
	fmt.Fprintln(w, "| scenario | proxy | req/s | ÷ nginx | p50 | p99 | errors | MB/s | upstream conns / 1k req | proxy CPU s / 100k req | CPU/req ÷ nginx | proxy CPU | others on CPU0 | CPU1 busy | req/s spread | peak RSS |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	// The nginx row of each scenario is the reference for the ratios,
	// taken round by round.
	ref := map[string]loadRow{}
	for _, r := range rows {
		if r.name == "nginx" && len(r.samples) > 0 {
			ref[r.sc.name] = r
		}
	}
	for _, r := range rows {
		name := r.name
		if name == direct.name {
			name = "(direct to upstream)"
		}
		if len(r.samples) == 0 {
			fmt.Fprintf(w, "| %s | %s | — | | | | | | | | | | | | | %s |\n", r.sc.title, name, r.failure)
			continue
		}
		st := r.stats()
		rpsRatio, cpuRatio := "—", "—"
		if n, ok := ref[r.sc.name]; ok {
			rpsRatio = fmtFloat(pairedRatio(r.samples, n.samples, reqPerSecond), "%.2f")
			if !math.IsNaN(st.cpuPer100k) {
				cpuRatio = fmtFloat(pairedRatio(r.samples, n.samples, cpuPerRequest), "%.2f")
			}
		}
		peak := "—"
		if r.peakKB > 0 {
			peak = fmtKB(float64(r.peakKB))
		}
		errs := fmt.Sprint(st.errors)
		if r.failure != "" {
			errs += " (" + r.failure + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %.0f%% | %s |\n",
			r.sc.title, name, st.rps, rpsRatio, fmtLatency(time.Duration(st.p50)), fmtLatency(time.Duration(st.p99)),
			errs, st.mbps, fmtPer1k(st.upstreamPer1k), fmtFloat(st.cpuPer100k, "%.2f"), cpuRatio, fmtPct(st.cpuPct), fmtPct(st.others0), fmtPct(st.cpu1),
			100*st.spread, peak)
	}
}

// tlsTable says what each proxy negotiated in each TLS scenario, and how
// many of bench/tlsload's handshakes were full and how many resumed.
func (b *bench) tlsTable(w io.Writer, rows []loadRow) {
	if !slices.ContainsFunc(rows, func(r loadRow) bool { return r.sc.tls }) {
		return
	}
	fmt.Fprintf(w, "\n### TLS negotiated\n\n")
	fmt.Fprintln(w, "| scenario | proxy | seen by | protocol | cipher suite | key exchange | ALPN | handshakes measured |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|--:|")
	for _, r := range rows {
		if !r.sc.tls || r.name == direct.name || len(r.samples) == 0 && r.failure != "" {
			continue
		}
		by, hs, alpn := "openssl s_client, once before the rounds", "—", cmp.Or(r.tls.alpn, "—")
		switch {
		case r.sc.h2:
			by = "h2load, its first connection in every round"
		case r.sc.h3:
			by = "bench/h3load, its first connection in every round"
		case r.sc.handshakes:
			by = "bench/tlsload, every handshake of the rounds"
			if total := r.tls.full + r.tls.resumed; total > 0 {
				hs = fmt.Sprintf("%d full, %d resumed (%.1f%%)", r.tls.full, r.tls.resumed, 100*float64(r.tls.resumed)/float64(total))
			}
		}
		if r.tlsErr != "" {
			fmt.Fprintf(w, "| %s | %s | %s | %s | | | | %s |\n", r.sc.title, r.name, by, r.tlsErr, hs)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.sc.title, r.name, by, r.tls.protocol, r.tls.cipher, r.tls.group, alpn, hs)
	}
}

// multiplexedTable gives what h2load (over HTTP/2) or bench/h3load (over
// HTTP/3, h3) reports beyond the load table: the requests by outcome,
// summed over the rounds, and the time for a request as h2load sums it up
// (no percentiles): the least and the most over the rounds, the mean, the
// deviation and the share within mean ± sd as medians. CPU per request is
// divided by that of the proxy sluice is held to: HAProxy over HTTP/2,
// Caddy over HTTP/3.
func (b *bench) multiplexedTable(w io.Writer, rows []loadRow, h3 bool) {
	in := func(r loadRow) bool { return r.sc.h2 && !h3 || r.sc.h3 && h3 }
	if !slices.ContainsFunc(rows, in) {
		return
	}
	title, refName, refTitle := "HTTP/2 (h2load)", "haproxy", "HAProxy"
	if h3 {
		title, refName, refTitle = "HTTP/3 (bench/h3load)", "caddy", "Caddy"
	}
	fmt.Fprintf(w, "\n### %s\n\n", title)
	fmt.Fprintf(w, "| scenario | proxy | requests done | 2xx | 3xx | 4xx | 5xx | errored | time for request: min | mean | sd | max | within mean ± sd | CPU/req ÷ %s |\n", refTitle)
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	ref := map[string]loadRow{}
	for _, r := range rows {
		if in(r) && r.name == refName && len(r.samples) > 0 {
			ref[r.sc.name] = r
		}
	}
	for _, r := range rows {
		if !in(r) || r.name == direct.name {
			continue
		}
		if len(r.samples) == 0 {
			fmt.Fprintf(w, "| %s | %s | — | | | | | | | | | | | %s |\n", r.sc.title, r.name, r.failure)
			continue
		}
		var h h2Result
		h.reqMin = time.Duration(math.MaxInt64)
		for _, s := range r.samples {
			h.done += s.h2.done
			for i := range h.codes {
				h.codes[i] += s.h2.codes[i]
			}
			h.errored += s.h2.errored
			h.reqMin, h.reqMax = min(h.reqMin, s.h2.reqMin), max(h.reqMax, s.h2.reqMax)
		}
		mean := medianOf(r.samples, func(s sample) float64 { return float64(s.h2.reqMean) })
		sd := medianOf(r.samples, func(s sample) float64 { return float64(s.h2.reqSD) })
		within := medianOf(r.samples, func(s sample) float64 { return s.h2.withinSDPct })
		ratio := "—"
		if n, ok := ref[r.sc.name]; ok && r.samples[0].cpu >= 0 {
			ratio = fmtFloat(pairedRatio(r.samples, n.samples, cpuPerRequest), "%.2f")
		}
		note := ""
		if r.failure != "" {
			note = " (" + r.failure + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %d%s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %.1f%% | %s |\n",
			r.sc.title, r.name, h.done, note, h.codes[0], h.codes[1], h.codes[2], h.codes[3], h.errored,
			fmtLatency(h.reqMin), fmtLatency(time.Duration(mean)), fmtLatency(time.Duration(sd)), fmtLatency(h.reqMax), within, ratio)
	}
}

func (b *bench) idleTable(w io.Writer, rows []idleRow) {
	kind := ""
	if rows[0].sc.tls {
		kind = " TLS"
	}
	fmt.Fprintf(w, "\n### %d idle%s keep-alive connections\n\n", b.opt.idleConns, kind)
	if b.opt.settle != 2*time.Second {
		fmt.Fprintf(w, "RSS with the connections idle read %s after they opened.\n\n", b.opt.settle)
	}
	fmt.Fprintln(w, "| proxy | held | failed | closed by proxy | RSS before | RSS with conns idle | RSS per idle conn | ÷ nginx | peak RSS | time to open |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	ref := math.NaN()
	for _, r := range rows {
		if r.name == "nginx" && len(r.samples) > 0 {
			ref = r.bytesPerConn()
		}
	}
	for _, r := range rows {
		if len(r.samples) == 0 {
			fmt.Fprintf(w, "| %s | — | | | | | | | | %s |\n", r.name, r.failure)
			continue
		}
		var held, failed, closed, before, after, peak, open []float64
		for _, s := range r.samples {
			held = append(held, float64(s.held))
			failed = append(failed, float64(s.failed))
			closed = append(closed, float64(s.closed))
			before = append(before, float64(s.beforeKB))
			after = append(after, float64(s.afterKB))
			peak = append(peak, float64(s.peakKB))
			open = append(open, s.openTime.Seconds())
		}
		bpc := r.bytesPerConn()
		ratio := "—"
		if !math.IsNaN(ref) && ref > 0 {
			ratio = fmt.Sprintf("%.2f", bpc/ref)
		}
		fail := fmt.Sprintf("%.0f", median(failed))
		if r.failure != "" {
			fail += " (" + r.failure + ")"
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %.0f | %s | %s | %s | %s | %s | %.1f s |\n",
			r.name, median(held), fail, median(closed), fmtKB(median(before)), fmtKB(median(after)),
			fmtBytes(bpc), ratio, fmtKB(median(peak)), median(open))
	}
}

// fmtLatency formats a latency in milliseconds; a negative one is one the
// load generator does not report (h2load's percentiles).
func fmtLatency(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d < 0:
		return "—"
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 100:
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

func fmtKB(kb float64) string { return fmt.Sprintf("%.1f MiB", kb/1024) }

func fmtBytes(b float64) string {
	if math.Abs(b) >= 10*1024 {
		return fmt.Sprintf("%.1f KiB", b/1024)
	}
	return fmt.Sprintf("%.0f B", b)
}

func fmtPct(x float64) string {
	if math.IsNaN(x) || x < 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}

// fmtPer1k formats upstream connections per 1000 requests: "?" when
// they could not be counted, never a 0 that was not measured.
func fmtPer1k(x float64) string {
	switch {
	case math.IsNaN(x):
		return "?"
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

func fmtFloat(x float64, format string) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf(format, x)
}
