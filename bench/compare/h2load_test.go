package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/config"
)

// The files in testdata are h2load's (nghttp2 1.52) standard output of
// real runs, -c 16 -m 10 --npn-list=h2 over TLS 1.3:
//
//   - h2load-sluice.txt: a measured round of h2-small against sluice,
//     printed by bench/compare -v;
//
// and against nginx 1.22 on its own:
//
//   - h2load-nginx.txt: GET /small, answered 200 by nginx itself;
//   - h2load-302.txt: a location that answers 302;
//   - h2load-404-goaway.txt: a path that answers 404, with nginx's
//     keepalive_requests at its default, 1000, so that each connection is
//     sent GOAWAY and the streams past it reset (errored);
//   - h2load-no-alpn.txt: nginx without http2 on the listener, which
//     refuses every handshake of a client that offers h2 alone;
//   - h2load-http11.txt: -c 2 and h2load's default ALPN list against that
//     nginx, which settles on http/1.1.
func TestParseH2load(t *testing.T) {
	tls13 := negotiated{protocol: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256", group: "X25519", alpn: "h2"}
	tests := []struct {
		file string
		want loadResult
		// notH2 is what requireH2 must say of the run; "" for nothing.
		notH2 string
	}{
		{file: "h2load-sluice.txt", want: loadResult{
			wrkResult: wrkResult{duration: 2 * time.Second, requests: 22707, bytes: 1069421, p50: -1, p99: -1},
			tls:       tls13,
			h2: h2Result{done: 22707, succeeded: 22707, codes: [4]int64{22707, 0, 0, 0},
				reqMin: 621 * time.Microsecond, reqMax: 183050 * time.Microsecond, reqMean: 13530 * time.Microsecond, reqSD: 16250 * time.Microsecond,
				withinSDPct: 94.71},
		}},
		{file: "h2load-nginx.txt", want: loadResult{
			wrkResult: wrkResult{duration: 2 * time.Second, requests: 127851, bytes: 11635225, p50: -1, p99: -1},
			tls:       tls13,
			h2: h2Result{done: 127851, succeeded: 127851, codes: [4]int64{127851, 0, 0, 0},
				reqMin: 185 * time.Microsecond, reqMax: 34340 * time.Microsecond, reqMean: 1770 * time.Microsecond, reqSD: 1750 * time.Microsecond,
				withinSDPct: 91.28},
		}},
		// 3xx is a success to h2load, an error here.
		{file: "h2load-302.txt", want: loadResult{
			wrkResult: wrkResult{duration: 2 * time.Second, requests: 16000, bytes: 3841056, status: 16000, p50: -1, p99: -1},
			tls:       tls13,
			h2: h2Result{done: 16000, succeeded: 16000, codes: [4]int64{0, 16000, 0, 0},
				reqMin: 295 * time.Microsecond, reqMax: 6710 * time.Microsecond, reqMean: 1370 * time.Microsecond, reqSD: 329 * time.Microsecond,
				withinSDPct: 95.05},
		}},
		// failed = 404s + errored; req/s leaves the errored out.
		{file: "h2load-404-goaway.txt", want: loadResult{
			wrkResult: wrkResult{duration: 2 * time.Second, requests: 16116, bytes: 3537056, sockErrs: 116, status: 16000, p50: -1, p99: -1},
			tls:       tls13,
			h2: h2Result{done: 16116, failed: 16116, errored: 116, codes: [4]int64{0, 0, 16000, 0},
				reqMin: 77 * time.Microsecond, reqMax: 8120 * time.Microsecond, reqMean: 2900 * time.Microsecond, reqSD: 782 * time.Microsecond,
				withinSDPct: 88.99},
		}},
		{file: "h2load-no-alpn.txt", notH2: "no TLS handshake completed", want: loadResult{
			wrkResult: wrkResult{duration: 2010 * time.Millisecond, p50: -1, p99: -1},
			h2:        h2Result{},
		}},
		{file: "h2load-http11.txt", notH2: `negotiated "http/1.1", not h2`, want: loadResult{
			wrkResult: wrkResult{duration: time.Second, requests: 100000, bytes: 17200000, p50: -1, p99: -1},
			tls:       negotiated{protocol: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256", group: "X25519", alpn: "http/1.1"},
			h2: h2Result{done: 100000, succeeded: 100000, codes: [4]int64{100000, 0, 0, 0},
				reqMin: 88 * time.Microsecond, reqMax: 1420 * time.Microsecond, reqMean: 198 * time.Microsecond, reqSD: 53 * time.Microsecond,
				withinSDPct: 83.42},
		}},
	}
	for _, tt := range tests {
		out, err := os.ReadFile(filepath.Join("testdata", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseH2load(out)
		if err != nil {
			t.Errorf("%s: %v", tt.file, err)
			continue
		}
		// The duration comes from a rate printed to 0.01 req/s.
		if d := got.duration - tt.want.duration; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: duration %v, want %v", tt.file, got.duration, tt.want.duration)
		}
		got.duration = tt.want.duration
		if got != tt.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.file, got, tt.want)
		}
		err = requireH2(got)
		switch {
		case tt.notH2 == "" && err != nil:
			t.Errorf("%s: requireH2: %v", tt.file, err)
		case tt.notH2 != "" && (err == nil || !strings.Contains(err.Error(), tt.notH2)):
			t.Errorf("%s: requireH2 = %v, want an error saying %q", tt.file, err, tt.notH2)
		}
	}
}

// h2 negotiated but nothing completed is no measurement either.
func TestRequireH2NoRequests(t *testing.T) {
	res := loadResult{tls: negotiated{protocol: "TLSv1.3", alpn: "h2"}}
	if err := requireH2(res); err == nil || !strings.Contains(err.Error(), "no request") {
		t.Errorf("requireH2 = %v, want no request completed", err)
	}
}

// Output cut short or changed is an error, never a row of zeros.
func TestParseH2loadBad(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "h2load-nginx.txt"))
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	bad := map[string]string{
		"empty":                     "",
		"killed before the summary": good[:strings.Index(good, "finished in")],
		"no time for request":       good[:strings.Index(good, "time for request")],
		"traffic in bytes":          strings.Replace(good, "11.10MB (11635225) total", "11635225 bytes total", 1),
		"a count not a number":      strings.Replace(good, "0 errored", "x errored", 1),
		"a count missing":           strings.Replace(good, ", 0 timeout", "", 1),
		"a class missing":           strings.Replace(good, ", 0 5xx", "", 1),
		"a time not a time":         strings.Replace(good, "1.77ms", "1.77", 1),
		"a time missing":            strings.Replace(good, "    91.28%", "", 1),
		"no req/s":                  strings.Replace(good, "63925.50 req/s", "63925.50", 1),
	}
	for name, out := range bad {
		if res, err := parseH2load([]byte(out)); err == nil {
			t.Errorf("%s: parseH2load = %+v, want an error", name, res)
		}
	}
}

// HTTP/2 is a group of its own: neither the default run nor the TLS set
// needs h2load.
func TestH2Scenarios(t *testing.T) {
	if got := expandScenarios([]string{"h2"}); !slices.Equal(got, []string{"h2-small"}) {
		t.Errorf("h2 = %q, want [h2-small]", got)
	}
	if got := expandScenarios([]string{"tls"}); slices.Contains(got, "h2-small") {
		t.Errorf("tls = %q, want no HTTP/2 scenario", got)
	}
	if got := expandScenarios([]string{"all"}); !slices.Contains(got, "h2-small") {
		t.Errorf("all = %q, want h2-small in it", got)
	}
	sc, ok := scenarioByName("h2-small")
	if !ok || !sc.h2 || !sc.tls || sc.path != "/small" || sc.handshakes || sc.idle {
		t.Errorf("h2-small = %+v, want h2 over TLS on /small", sc)
	}
	o, err := parseFlags([]string{"-scenarios", "h2"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.scenarios, []string{"h2-small"}) || o.h2Conns != 16 || o.h2Streams != 10 {
		t.Errorf("-scenarios h2: scenarios %q, h2load -c %d -m %d; want [h2-small], -c 16 -m 10", o.scenarios, o.h2Conns, o.h2Streams)
	}
	o, _ = parseFlags(nil)
	if slices.ContainsFunc(o.scenarios, func(n string) bool { sc, _ := scenarioByName(n); return sc.h2 }) {
		t.Errorf("default scenarios %q include an HTTP/2 one", o.scenarios)
	}
	for _, args := range [][]string{{"-h2-conns", "0"}, {"-h2-streams", "0"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// Every proxy, go-relay too, takes part in the HTTP/2 scenario; direct
// (plain HTTP) sits it out.
func TestH2SitsOut(t *testing.T) {
	sc, _ := scenarioByName("h2-small")
	for _, name := range []string{"sluice", "nginx", "haproxy", "caddy", "go-relay"} {
		p, _ := proxyByName(name)
		if why := p.sitsOutWhy(sc); why != "" {
			t.Errorf("%s sits out h2-small: %s", name, why)
		}
	}
	if !direct.sitsOut(sc) {
		t.Error("direct does not sit out h2-small")
	}
}

// In the HTTP/2 scenario every proxy offers h2 on its TLS listener: nginx
// and HAProxy because they are told to, Caddy and sluice by default, which
// sluice's config writes out. The TLS scenarios' configs stay as they were.
func TestH2Configs(t *testing.T) {
	f := &tlsFiles{cert: "/t/cert.pem", key: "/t/key.pem", pem: "/t/cert-and-key.pem"}
	tests := []struct {
		name      string
		configure func(site) ([]string, []string, error)
		file      string
		h2, tls   []string // in the config with h2, and with TLS but not h2
	}{
		{"nginx", nginxConfig, "nginx.conf",
			[]string{"listen 127.0.0.1:8443 ssl http2 backlog=4096;"},
			[]string{"listen 127.0.0.1:8443 ssl backlog=4096;"}},
		{"haproxy", haproxyConfig, "haproxy.cfg",
			[]string{"bind 127.0.0.1:8443 ssl crt /t/cert-and-key.pem alpn h2,http/1.1\n"},
			[]string{"bind 127.0.0.1:8443 ssl crt /t/cert-and-key.pem\n"}},
		{"caddy", caddyConfig, "Caddyfile",
			[]string{"protocols h1 h2\n"},
			[]string{"protocols h1 h2\n"}},
		{"sluice", sluiceConfig, "sluice.yaml",
			[]string{"    protocols: [h2, http/1.1]\n"},
			[]string{"tls: {min_version: 1.3"}},
	}
	for _, tt := range tests {
		for _, h2 := range []bool{false, true} {
			dir := t.TempDir()
			s := site{dir: dir, port: 8443, upstream: "127.0.0.1:9000", noFile: 20000, idleConns: 10000, binary: "/bin/" + tt.name, tls: f, h2: h2}
			if _, _, err := tt.configure(s); err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			b, err := os.ReadFile(filepath.Join(dir, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			want, notWant := tt.tls, []string{"http2", "alpn", "protocols: ["}
			if h2 {
				want, notWant = tt.h2, nil
			}
			for _, line := range want {
				if !strings.Contains(string(b), line) {
					t.Errorf("%s, h2 %v: no %q in the config:\n%s", tt.name, h2, line, b)
				}
			}
			for _, word := range notWant {
				if strings.Contains(string(b), word) {
					t.Errorf("%s, h2 %v: %q in the config:\n%s", tt.name, h2, word, b)
				}
			}
		}
	}
}

// sluice's HTTP/2 config is one sluice's own config package loads and
// builds, with h2 first in its listener's ALPN list.
func TestSluiceH2Config(t *testing.T) {
	dir := t.TempDir()
	f, err := makeTLSFiles(filepath.Join(dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	s := site{dir: dir, port: 8443, upstream: "127.0.0.1:9000", binary: "/bin/sluice", tls: f, h2: true}
	if _, _, err := sluiceConfig(s); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(dir, "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Listen) != 1 || cfg.Listen[0].TLS == nil || !slices.Equal(cfg.Listen[0].Protocols, []string{"h2", "http/1.1"}) {
		t.Fatalf("listeners %+v, want one with tls and protocols [h2 http/1.1]", cfg.Listen)
	}
	if _, err := config.Build(cfg); err != nil {
		t.Errorf("Build: %v", err)
	}
}

// h2load rounds that negotiated different protocols do not add up.
func TestSumHandshakesALPN(t *testing.T) {
	at := func(alpn string) sample {
		return sample{tls: negotiated{protocol: "TLSv1.3", cipher: "A", group: "X25519", alpn: alpn}}
	}
	if n, errText := sumHandshakes([]sample{at("h2"), at("h2")}); errText != "" || n.alpn != "h2" {
		t.Errorf("sumHandshakes = %+v, %q; want ALPN h2", n, errText)
	}
	if _, errText := sumHandshakes([]sample{at("h2"), at("http/1.1")}); errText == "" {
		t.Error("rounds of h2 and http/1.1: no error")
	}
}

// The HTTP/2 target holds sluice to HAProxy, not nginx.
func TestVerdictsH2(t *testing.T) {
	sc, _ := scenarioByName("h2-small")
	at := func(round int, cpu float64) sample {
		return sample{wrkResult: wrkResult{requests: 1000, duration: time.Second, p50: -1, p99: -1}, cpu: cpu, round: round}
	}
	loads := []loadRow{
		{sc: sc, name: "sluice", samples: []sample{at(0, 0.9), at(1, 1.8)}},
		{sc: sc, name: "nginx", samples: []sample{at(0, 0.5), at(1, 1)}},
		{sc: sc, name: "haproxy", samples: []sample{at(0, 1), at(1, 2)}},
	}
	vs := verdicts(loads, nil)
	if len(vs) != 1 || vs[0].what != "HTTP/2 small GET: CPU per request ÷ HAProxy" || math.Abs(vs[0].got-0.9) > 1e-9 || vs[0].missBy != 0 {
		t.Fatalf("verdicts = %+v, want one, 0.9 of HAProxy's, met", vs)
	}
	if !math.IsNaN(vs[0].floor) {
		t.Errorf("without go-relay: floor %v, want NaN", vs[0].floor)
	}
	// go-relay's figure, paired with HAProxy's as sluice's is, is the floor.
	relay := loadRow{sc: sc, name: "go-relay", samples: []sample{at(0, 1.2), at(1, 2.4)}}
	withRelay := verdicts(append(loads, relay), nil)
	if len(withRelay) != 1 || math.Abs(withRelay[0].floor-1.2) > 1e-9 {
		t.Fatalf("with go-relay: verdicts = %+v, want the floor at 1.2", withRelay)
	}
	var out strings.Builder
	(&bench{}).targetTable(&out, append(withRelay, vs...))
	for _, want := range []string{
		"| HTTP/2 small GET: CPU per request ÷ HAProxy | ≤ 1.00 | 0.90 | met | 1.20 |",
		"| HTTP/2 small GET: CPU per request ÷ HAProxy | ≤ 1.00 | 0.90 | met | — |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	// Without HAProxy the target is not checked, whatever nginx did.
	if vs := verdicts(loads[:2], nil); len(vs) != 0 {
		t.Errorf("without haproxy: verdicts = %+v, want none", vs)
	}
}

// The HTTP/2 table: counts summed over the rounds, the least and most
// time for a request over them, CPU per request ÷ HAProxy; a row that sits
// out or failed says why; every line has as many cells as the header.
func TestH2Table(t *testing.T) {
	sc, _ := scenarioByName("h2-small")
	at := func(round int, cpu float64, mean time.Duration) sample {
		return sample{
			wrkResult: wrkResult{requests: 1000, duration: time.Second, p50: -1, p99: -1}, cpu: cpu, round: round,
			h2: h2Result{done: 1000, codes: [4]int64{998, 0, 2, 0}, errored: 1,
				reqMin: mean / 10, reqMax: mean * 10, reqMean: mean, reqSD: mean / 2, withinSDPct: 90},
		}
	}
	rows := []loadRow{
		{sc: sc, name: "sluice", samples: []sample{at(0, 0.8, time.Millisecond), at(1, 1.6, 2*time.Millisecond), at(2, 2.4, 3*time.Millisecond)}},
		{sc: sc, name: "haproxy", samples: []sample{at(0, 1, time.Millisecond), at(1, 2, time.Millisecond), at(2, 3, time.Millisecond)}},
		{sc: sc, name: "caddy", failure: "caddy: exit status 1"},
		{sc: sc, name: direct.name, failure: "sits out this scenario"},
	}
	var out strings.Builder
	(&bench{}).multiplexedTable(&out, rows, false)
	var none strings.Builder
	(&bench{}).multiplexedTable(&none, rows, true)
	if none.Len() != 0 {
		t.Errorf("an HTTP/3 table of HTTP/2 rows:\n%s", none.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 7 { // title, blank, header, rule, sluice, haproxy, caddy; no direct
		t.Fatalf("%d lines, want 7:\n%s", len(lines), out.String())
	}
	cells := strings.Count(lines[2], "|")
	for _, line := range lines[3:] {
		if n := strings.Count(line, "|"); n != cells {
			t.Errorf("%d cells, want %d: %s", n-1, cells-1, line)
		}
	}
	for _, want := range []string{
		"| HTTP/2 small GET (h2load) | sluice | 3000 | 2994 | 0 | 6 | 0 | 3 | 0.10 ms | 2.00 ms | 1.00 ms | 30.0 ms | 90.0% | 0.80 |",
		"| haproxy | 3000 |",
		"| caddy | — |",
		"exit status 1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
}

// The HTTP/3 table is the HTTP/2 one for the HTTP/3 rows, CPU per
// request divided by Caddy's.
func TestH3Table(t *testing.T) {
	sc, _ := scenarioByName("h3-small")
	at := func(round int, cpu float64) sample {
		return sample{wrkResult: wrkResult{requests: 1000, duration: time.Second, p50: -1, p99: -1}, cpu: cpu, round: round,
			h2: h2Result{done: 1000, codes: [4]int64{1000, 0, 0, 0}, reqMin: time.Millisecond, reqMax: time.Second, reqMean: time.Millisecond}}
	}
	rows := []loadRow{
		{sc: sc, name: "sluice", samples: []sample{at(0, 0.5), at(1, 0.6)}},
		{sc: sc, name: "caddy", samples: []sample{at(0, 1), at(1, 1)}},
		{sc: sc, name: "nginx", failure: "serves no HTTP/3"},
	}
	var out strings.Builder
	(&bench{}).multiplexedTable(&out, rows, true)
	for _, want := range []string{"### HTTP/3 (bench/h3load)", "CPU/req ÷ Caddy |", "| HTTP/3 small GET (bench/h3load) | sluice | 2000 |", "| 0.55 |", "serves no HTTP/3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
}
