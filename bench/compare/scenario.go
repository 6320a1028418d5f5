package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scenario is one kind of load.
type scenario struct {
	name   string // for -scenarios
	title  string // for the table
	path   string // requested from the proxy
	lua    string // wrk script lines before the done hook
	header string // extra request header for wrk's -H
	idle   bool   // the idle-connections scenario, not a wrk run
	logged bool   // the proxies write an access log, as each does by default
	tls    bool   // the proxies serve TLS 1.3 with the run's certificate
	// handshakes makes the load bench/tlsload instead of wrk: a new TLS
	// connection per request, each with a full handshake, or with resume
	// each after a client's first resuming the session its last one got.
	handshakes, resume bool
	// h2 makes the load h2load, HTTP/2 over TLS: the proxies offer h2 by
	// ALPN beside HTTP/1.1, and the upstream stays HTTP/1.1.
	h2 bool
	// h3 makes the load bench/h3load, HTTP/3 (h2load's figures): the
	// proxies that can serve HTTP/3 on a UDP socket at their TLS
	// listener's port, beside h2 and HTTP/1.1; the others sit out.
	h3 bool
	// static makes the proxies serve path from files, the upstream's
	// www/static directory, themselves (sluice's static route, nginx's
	// alias); the upstream is not asked.
	static bool
	// cache makes the proxies cache (sluice's cache, nginx's proxy_cache,
	// HAProxy's cache, Varnish): path is a response the upstream marks
	// cacheable for an hour, so that after the warm-up every request is
	// a hit.
	cache bool
}

var scenarios = []scenario{
	{name: "small", title: "small GET", path: "/small"},
	{name: "16k", title: "16 KiB GET", path: "/16k"},
	{name: "1m", title: "1 MiB GET", path: "/1m"},
	{name: "post4k", title: "4 KiB POST", path: "/post", lua: postSetup},
	{name: "close", title: "conn per request", path: "/small", header: "Connection: close"},
	{name: "logged", title: "small GET, access log", path: "/small", logged: true},
	{name: "idle", title: "idle connections", idle: true},
	{name: "tls-small", title: "TLS small GET", path: "/small", tls: true},
	{name: "tls-close", title: "TLS conn per request, full handshake", path: "/small", tls: true, handshakes: true},
	{name: "tls-resume", title: "TLS conn per request, resumed", path: "/small", tls: true, handshakes: true, resume: true},
	{name: "tls-1m", title: "TLS 1 MiB GET", path: "/1m", tls: true},
	{name: "tls-idle", title: "idle TLS connections", idle: true, tls: true},
	{name: "h2-small", title: "HTTP/2 small GET (h2load)", path: "/small", tls: true, h2: true},
	{name: "h3-small", title: "HTTP/3 small GET (bench/h3load)", path: "/small", tls: true, h3: true},
	{name: "static-small", title: "small file, static route", path: "/static/small.txt", static: true},
	{name: "static-1m", title: "1 MiB file, static route", path: "/static/1m.bin", static: true},
	{name: "cache-small", title: "small hit, cache", path: "/cached/small", cache: true},
	{name: "cache-1m", title: "1 MiB hit, cache", path: "/cached/1m", cache: true},
}

// scenarioGroups are names -scenarios takes for several scenarios. The
// HTTP/2 and HTTP/3 ones are groups of their own, so that the TLS set
// still needs no more than wrk and openssl.
var scenarioGroups = map[string]func(scenario) bool{
	"all":    func(scenario) bool { return true },
	"plain":  func(sc scenario) bool { return !sc.tls && !sc.static && !sc.cache },
	"static": func(sc scenario) bool { return sc.static },
	"cache":  func(sc scenario) bool { return sc.cache },
	"tls":    func(sc scenario) bool { return sc.tls && !sc.multiplexed() },
	"h2":     func(sc scenario) bool { return sc.h2 },
	"h3":     func(sc scenario) bool { return sc.h3 },
}

// expandScenarios replaces each group name in names by its scenarios, in
// the order of the scenarios list, and drops repeats.
func expandScenarios(names []string) []string {
	var out []string
	for _, name := range names {
		in, ok := scenarioGroups[name]
		if !ok {
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
			continue
		}
		for _, sc := range scenarios {
			if in(sc) && !slices.Contains(out, sc.name) {
				out = append(out, sc.name)
			}
		}
	}
	return out
}

// multiplexed reports whether the scenario's load is h2load or
// bench/h3load: many streams on few connections, h2load's figures.
func (sc scenario) multiplexed() bool { return sc.h2 || sc.h3 }

func scenarioByName(name string) (scenario, bool) {
	for _, sc := range scenarios {
		if sc.name == name {
			return sc, true
		}
	}
	return scenario{}, false
}

// sample is one measured wrk run against one target.
type sample struct {
	wrkResult
	wall       time.Duration // the wrk process's run, the window of the CPU figures
	cpu        float64       // proxy CPU seconds in the window; -1 for direct
	cpu0, cpu1 float64       // share of the window each CPU was busy, all processes
	upConns    int64         // connections the upstream accepted during the run; -1 if not known
	round      int           // which round it was measured in
	tls        negotiated    // the handshakes of the run, as bench/tlsload counted them; h2load's first
	h2         h2Result      // the rest of h2load's (or bench/h3load's) summary
}

// upstreamPer1k is the upstream connections opened per 1000 requests
// wrk completed; NaN if they are not known.
func (s sample) upstreamPer1k() float64 {
	if s.upConns < 0 {
		return math.NaN()
	}
	return float64(s.upConns) / float64(max(s.requests, 1)) * 1000
}

// others0 is the share of CPU 0 that went to processes other than the
// proxy: noise from the rest of the machine.
func (s sample) others0() float64 {
	if s.cpu0 < 0 {
		return -1
	}
	return max(0, s.cpu0-max(0, s.cpu)/s.wall.Seconds())
}

// loadRow is one proxy in one wrk scenario.
type loadRow struct {
	sc      scenario
	name    string
	samples []sample
	peakKB  uint64 // VmHWM at the end of the scenario (warm-up and rounds)
	failure string // why the proxy has no or fewer samples
	// tls is what the proxy negotiated in a TLS scenario: with wrk, what
	// openssl s_client negotiated once before the rounds; with
	// bench/tlsload, the handshakes of the rounds, counted. tlsErr says
	// why it is not known.
	tls    negotiated
	tlsErr string
}

// live is a target started for a scenario.
type live struct {
	row  *loadRow
	p    proxy
	c    *child // nil for direct
	port int
}

// loadScenario starts a fresh instance of every target, warms each up,
// then runs the rounds: in each round every target once, the order
// rotated from round to round so that drift hits all alike.
func (b *bench) loadScenario(sc scenario) []loadRow {
	ctx := context.Background()
	var lives []*live
	rows := make([]loadRow, len(b.targets))
	for i, p := range b.targets {
		rows[i] = loadRow{sc: sc, name: p.name}
		if why := p.sitsOutWhy(sc); why != "" {
			rows[i].failure = why
			continue
		}
		l := &live{row: &rows[i], p: p}
		if p.name == direct.name {
			l.port, _ = strconv.Atoi(b.upstream[strings.LastIndexByte(b.upstream, ':')+1:])
		} else {
			c, port, err := b.startProxy(p, sc, sc.name)
			if err != nil {
				l.row.failure = "did not start: " + firstLine(err.Error())
				fmt.Fprintf(os.Stderr, "compare: [%s] %s did not start: %v\n", sc.name, p.name, err)
				continue
			}
			defer c.stop()
			l.c, l.port = c, port
			// h2load says what it negotiated itself, in every run.
			if sc.tls && !sc.handshakes && !sc.multiplexed() {
				b.checkTLS(ctx, sc, l)
			}
		}
		lives = append(lives, l)
	}
	for _, l := range lives {
		if b.opt.warmup > 0 {
			if _, err := b.runLoad(ctx, sc, l.port, b.opt.warmup); err != nil {
				fmt.Fprintf(os.Stderr, "compare: [%s] %s warm-up: %v\n", sc.name, l.p.name, err)
			}
		}
	}
	for r := range b.opt.rounds {
		for i := range lives {
			l := lives[(i+r)%len(lives)]
			if l.row.failure != "" {
				continue
			}
			s, err := b.measure(ctx, sc, l)
			if err != nil {
				l.row.failure = firstLine(err.Error())
				fmt.Fprintf(os.Stderr, "compare: [%s] %s: %v\n", sc.name, l.p.name, err)
				continue
			}
			s.round = r
			l.row.samples = append(l.row.samples, s)
			if sc.multiplexed() {
				fmt.Fprintf(os.Stderr, "compare: [%s] round %d/%d %-7s %8.0f req/s  %s  time for request mean %s max %s  errors %d (failed %d, errored %d, 3xx %d)  proxy CPU %s  others on CPU0 %s  CPU1 busy %s\n",
					sc.name, r+1, b.opt.rounds, l.p.name, rate(s.requests, s.duration), s.tls, fmtLatency(s.h2.reqMean), fmtLatency(s.h2.reqMax),
					s.sockErrs+s.status, s.h2.failed, s.h2.errored, s.h2.codes[1], fmtPct(s.cpu/s.wall.Seconds()), fmtPct(s.others0()), fmtPct(s.cpu1))
				continue
			}
			fmt.Fprintf(os.Stderr, "compare: [%s] round %d/%d %-7s %8.0f req/s  p99 %-9s errors %d  proxy CPU %s  others on CPU0 %s  CPU1 busy %s  upstream conns / 1k req %s\n",
				sc.name, r+1, b.opt.rounds, l.p.name, rate(s.requests, s.duration), fmtLatency(s.p99),
				s.sockErrs+s.status, fmtPct(s.cpu/s.wall.Seconds()), fmtPct(s.others0()), fmtPct(s.cpu1), fmtPer1k(s.upstreamPer1k()))
			if sc.handshakes {
				fmt.Fprintf(os.Stderr, "compare: [%s] round %d/%d %-7s handshakes: %s, %d full, %d resumed\n",
					sc.name, r+1, b.opt.rounds, l.p.name, s.tls, s.tls.full, s.tls.resumed)
			}
		}
	}
	for _, l := range lives {
		if l.c != nil {
			l.row.peakKB = groupUsage(l.c.pid()).hwmKB
		}
		if (sc.handshakes || sc.multiplexed()) && len(l.row.samples) > 0 {
			l.row.tls, l.row.tlsErr = sumHandshakes(l.row.samples)
		}
	}
	return rows
}

// checkTLS asks openssl s_client what the proxy negotiates with a client
// of wrk's OpenSSL, and records it in the row.
func (b *bench) checkTLS(ctx context.Context, sc scenario, l *live) {
	if b.tools["openssl"] == "" {
		l.row.tlsErr = "not checked: no openssl"
		return
	}
	n, err := sslCheck(ctx, b.tools["openssl"], l.port)
	if err != nil {
		l.row.tlsErr = "check failed: " + firstLine(err.Error())
		fmt.Fprintf(os.Stderr, "compare: [%s] %s: %v\n", sc.name, l.p.name, err)
		return
	}
	l.row.tls = n
	fmt.Fprintf(os.Stderr, "compare: [%s] %s negotiates %s with openssl s_client\n", sc.name, l.p.name, n)
}

// sumHandshakes adds up the handshakes bench/tlsload counted in each
// round; for h2load, it checks that every round negotiated the same.
// Rounds that negotiated differently make it an error.
func sumHandshakes(ss []sample) (negotiated, string) {
	var n negotiated
	for _, s := range ss {
		if n.protocol == "" {
			n.protocol, n.cipher, n.group, n.alpn = s.tls.protocol, s.tls.cipher, s.tls.group, s.tls.alpn
		} else if n.String() != s.tls.String() {
			return n, fmt.Sprintf("rounds negotiated both %s and %s", n, s.tls)
		}
		n.full += s.tls.full
		n.resumed += s.tls.resumed
	}
	return n, ""
}

// measure runs wrk once against l and reads the proxy's CPU time and
// the CPUs' busy time around it, and the upstream's accepts counter
// around that: the connections opened to the upstream during the run,
// by the proxy (or, for direct, by wrk). The other proxies of the
// scenario sit idle meanwhile and open none.
func (b *bench) measure(ctx context.Context, sc scenario, l *live) (sample, error) {
	up0, upErr := b.upstreamAccepts()
	var u0 usage
	if l.c != nil {
		u0 = groupUsage(l.c.pid())
	}
	t0 := readCPUTimes()
	start := time.Now()
	res, err := b.runLoad(ctx, sc, l.port, b.opt.duration)
	wall := time.Since(start)
	t1 := readCPUTimes()
	if err != nil {
		return sample{}, err
	}
	s := sample{wrkResult: res.wrkResult, tls: res.tls, h2: res.h2, wall: wall, cpu: -1, cpu0: t1.busySince(t0, 0), cpu1: t1.busySince(t0, 1), upConns: -1}
	if l.c != nil {
		if !l.c.alive() {
			return sample{}, fmt.Errorf("%s exited during the run (%v): %s", l.p.name, l.c.err, l.c.logTail())
		}
		s.cpu = float64(groupUsage(l.c.pid()).ticks-u0.ticks) / b.clk
	}
	if upErr == nil {
		var up1 int64
		if up1, upErr = b.upstreamAccepts(); upErr == nil {
			s.upConns, upErr = connsBetween(up0, up1)
		}
	}
	if upErr != nil && b.status {
		fmt.Fprintf(os.Stderr, "compare: [%s] %s: upstream connections not counted: %v\n", sc.name, l.p.name, upErr)
	}
	return s, nil
}

// upstreamAccepts reads the upstream's accepts counter.
func (b *bench) upstreamAccepts() (int64, error) {
	if !b.status {
		return 0, errors.New("no stub_status")
	}
	st, err := readStubStatus(b.upstream)
	return st.accepts, err
}

// idleSample is one idle-connections measurement of a fresh proxy.
type idleSample struct {
	held, failed, closed int
	firstErr             error
	openTime             time.Duration
	beforeKB, afterKB    uint64 // VmRSS before opening and with the connections idle
	peakKB               uint64 // VmHWM with the connections idle
}

type idleRow struct {
	sc      scenario
	name    string
	samples []idleSample
	failure string
}

// idleScenario measures, for each proxy, the memory that idle keep-alive
// client connections cost: a fresh proxy is warmed up with the small
// scenario (tls-small for tls-idle), its RSS read, then opts.idleConns
// connections are opened (over TLS for tls-idle, each through its
// handshake), each sends one GET and reads the response; -idle-settle (2 s)
// later RSS is read again. A fresh process per round, since memory a process has grown
// seldom goes back. Memory is not what the noise of the machine
// disturbs, so at most idleRounds rounds are run.
func (b *bench) idleScenario(sc scenario) []idleRow {
	ctx := context.Background()
	warm, _ := scenarioByName("small")
	if sc.tls {
		warm, _ = scenarioByName("tls-small")
	}
	var targets []proxy
	for _, p := range b.targets {
		if p.name != direct.name && !p.sitsOut(sc) {
			targets = append(targets, p)
		}
	}
	rows := make([]idleRow, len(targets))
	for i, p := range targets {
		rows[i].sc, rows[i].name = sc, p.name
	}
	rounds := min(b.opt.rounds, idleRounds)
	for r := range rounds {
		for i := range targets {
			k := (i + r) % len(targets)
			p, row := targets[k], &rows[k]
			if row.failure != "" {
				continue
			}
			s, err := b.idleOnce(ctx, p, sc, warm, r)
			if err != nil {
				row.failure = firstLine(err.Error())
				fmt.Fprintf(os.Stderr, "compare: [%s] %s: %v\n", sc.name, p.name, err)
				continue
			}
			row.samples = append(row.samples, s)
			fmt.Fprintf(os.Stderr, "compare: [%s] round %d/%d %-7s held %d failed %d closed %d  RSS %.1f -> %.1f MiB\n",
				sc.name, r+1, rounds, p.name, s.held, s.failed, s.closed,
				float64(s.beforeKB)/1024, float64(s.afterKB)/1024)
			if s.firstErr != nil {
				fmt.Fprintf(os.Stderr, "compare: [%s] %s: first failure: %v\n", sc.name, p.name, s.firstErr)
			}
		}
	}
	return rows
}

func (b *bench) idleOnce(ctx context.Context, p proxy, sc, warm scenario, round int) (idleSample, error) {
	c, port, err := b.startProxy(p, sc, fmt.Sprintf("%s%d", sc.name, round))
	if err != nil {
		return idleSample{}, err
	}
	defer c.stop()
	if b.opt.warmup > 0 {
		if _, err := b.runLoad(ctx, warm, port, b.opt.warmup); err != nil {
			return idleSample{}, err
		}
	}
	time.Sleep(time.Second)
	before := groupUsage(c.pid())
	start := time.Now()
	var cfg *tls.Config
	if sc.tls {
		cfg = b.tls.loadTLS()
	}
	set := openIdle(port, b.opt.idleConns, cfg)
	defer set.close()
	s := idleSample{held: len(set.conns), failed: set.failed, firstErr: set.first, openTime: time.Since(start)}
	time.Sleep(b.opt.settle)
	after := groupUsage(c.pid())
	s.closed = set.closedByPeer()
	s.beforeKB, s.afterKB, s.peakKB = before.rssKB, after.rssKB, after.hwmKB
	if !c.alive() {
		return s, fmt.Errorf("%s exited (%v): %s", p.name, c.err, c.logTail())
	}
	return s, nil
}
