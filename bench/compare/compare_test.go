package main

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestParseWrk(t *testing.T) {
	out := []byte(`Running 2s test @ http://127.0.0.1:1/post
  1 threads and 64 connections
  29715 requests in 2.00s, 3.97MB read
  Socket errors: connect 0, read 6, write 153, timeout 0
Requests/sec:  14838.05
WRK-RESULT 2002621 29715 4160100 0 6 153 2 0 4024 11807
`)
	got, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	want := wrkResult{
		duration: 2002621 * time.Microsecond,
		requests: 29715,
		bytes:    4160100,
		sockErrs: 159,
		status:   2,
		p50:      4024 * time.Microsecond,
		p99:      11807 * time.Microsecond,
	}
	if got != want {
		t.Errorf("parseWrk = %+v, want %+v", got, want)
	}
	if _, err := parseWrk([]byte("Requests/sec: 1\n")); !errors.Is(err, errNoResult) {
		t.Errorf("no result line: err = %v, want errNoResult", err)
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		stat  string
		pgrp  int
		ticks uint64
		ok    bool
		name  string
	}{
		{"4242 (nginx) S 1 4240 4240 0 -1 4194624 100 0 0 0 37 12 0 0 20 0 1 0 1 1 1", 4240, 49, true, "plain"},
		{"7 (a b) c)) R 1 9 9 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 1 1 1", 9, 11, true, "spaces and parens in comm"},
		{"7 (x) R 1 9", 0, 0, false, "short"},
		{"garbage", 0, 0, false, "no parens"},
	}
	for _, tt := range tests {
		pgrp, ticks, ok := parseStat([]byte(tt.stat))
		if pgrp != tt.pgrp || ticks != tt.ticks || ok != tt.ok {
			t.Errorf("%s: parseStat = %d, %d, %v; want %d, %d, %v", tt.name, pgrp, ticks, ok, tt.pgrp, tt.ticks, tt.ok)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median(nil) is not NaN")
	}
}

func TestPairedRatio(t *testing.T) {
	// The machine slows down in round 2: both targets take twice the CPU
	// there. A ratio of medians would mix the rounds; paired, each round
	// says 1.5.
	at := func(round int, cpu float64) sample {
		return sample{wrkResult: wrkResult{requests: 1000}, cpu: cpu, round: round}
	}
	a := []sample{at(0, 3), at(1, 3), at(2, 6)}
	b := []sample{at(0, 2), at(1, 2), at(2, 4)}
	if got := pairedRatio(a, b, cpuPerRequest); math.Abs(got-1.5) > 1e-9 {
		t.Errorf("pairedRatio = %v, want 1.5", got)
	}
	// A round the reference has no sample for is left out.
	if got := pairedRatio([]sample{at(0, 3), at(5, 100)}, b, cpuPerRequest); math.Abs(got-1.5) > 1e-9 {
		t.Errorf("pairedRatio with an unpaired round = %v, want 1.5", got)
	}
	if !math.IsNaN(pairedRatio(a, nil, cpuPerRequest)) {
		t.Error("pairedRatio without a reference is not NaN")
	}
}

func TestBusySince(t *testing.T) {
	t0 := cpuTimes{busy: []uint64{100, 50}, total: []uint64{1000, 1000}}
	t1 := cpuTimes{busy: []uint64{175, 50}, total: []uint64{1100, 1000}}
	if got := t1.busySince(t0, 0); got != 0.75 {
		t.Errorf("cpu0 = %v, want 0.75", got)
	}
	if got := t1.busySince(t0, 1); got != -1 {
		t.Errorf("cpu1 (no time passed) = %v, want -1", got)
	}
	if got := t1.busySince(t0, 2); got != -1 {
		t.Errorf("cpu2 (absent) = %v, want -1", got)
	}
}

func TestCheck(t *testing.T) {
	atMost := goal{limit: 1.2}
	atLeast := goal{limit: 1, atLeast: true}
	tests := []struct {
		name   string
		g      goal
		got    float64
		missBy float64
	}{
		{"under an upper bound", atMost, 1.1, 0},
		{"on an upper bound", atMost, 1.2, 0},
		{"over an upper bound", atMost, 1.32, 0.1},
		{"over a lower bound", atLeast, 1.25, 0},
		{"under a lower bound", atLeast, 0.93, 0.07},
	}
	for _, tt := range tests {
		if v := check(tt.g, tt.got); math.Abs(v.missBy-tt.missBy) > 1e-9 {
			t.Errorf("%s: missBy = %v, want %v", tt.name, v.missBy, tt.missBy)
		}
	}
	if v := check(atMost, math.NaN()); !math.IsNaN(v.missBy) {
		t.Errorf("not measured: missBy = %v, want NaN", v.missBy)
	}
}

func TestVerdicts(t *testing.T) {
	// sluice takes 1.1 times nginx's CPU per small GET in each round and
	// serves as many requests; only goals of scenarios that ran are checked.
	at := func(round int, cpu float64) sample {
		return sample{wrkResult: wrkResult{requests: 1000, duration: time.Second, p99: time.Millisecond}, cpu: cpu, round: round}
	}
	small, _ := scenarioByName("small")
	loads := []loadRow{
		{sc: small, name: "sluice", samples: []sample{at(0, 1.1), at(1, 2.2)}},
		{sc: small, name: "nginx", samples: []sample{at(0, 1), at(1, 2)}},
	}
	idle, _ := scenarioByName("idle")
	idles := []idleRow{{sc: idle, name: "sluice", samples: []idleSample{{beforeKB: 1000, afterKB: 1000 + 3*10000, held: 10000}}}}
	vs := verdicts(loads, idles)
	want := map[string]float64{
		"small GET: CPU per request ÷ nginx":   0.1,
		"small GET: req/s ÷ nginx":             0,
		"small GET: p99 ÷ nginx":               0,
		"idle keep-alive connection: RSS each": 0,
	}
	if len(vs) != len(want) {
		t.Fatalf("%d verdicts, want %d: %+v", len(vs), len(want), vs)
	}
	for _, v := range vs {
		if m, ok := want[v.what]; !ok || math.Abs(v.missBy-m) > 1e-9 {
			t.Errorf("%s: got %v, missBy %v; want missBy %v", v.what, v.got, v.missBy, m)
		}
	}
}

func TestParseStubStatus(t *testing.T) {
	// As nginx 1.22 writes it, a space before each newline.
	page := "Active connections: 3 \nserver accepts handled requests\n 1207 1205 98811 \nReading: 0 Writing: 1 Waiting: 2 \n"
	got, err := parseStubStatus([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if want := (stubStatus{active: 3, accepts: 1207, handled: 1205, requests: 98811}); got != want {
		t.Errorf("parseStubStatus = %+v, want %+v", got, want)
	}
	bad := map[string]string{
		"empty":            "",
		"an error page":    "<html><head><title>404 Not Found</title></head></html>\n",
		"no counters line": "Active connections: 3 \nserver accepts handled requests\n",
		"two counters":     "Active connections: 3 \nserver accepts handled requests\n 1207 1205 \n",
		"not a number":     "Active connections: 3 \nserver accepts handled requests\n 1207 x 98811 \n",
		"negative":         "Active connections: 3 \nserver accepts handled requests\n -1 1205 98811 \n",
		"no active line":   "server accepts handled requests\n 1207 1205 98811 \n",
		"other names":      "Active connections: 3 \nserver handled accepts requests\n 1207 1205 98811 \n",
	}
	for name, page := range bad {
		if st, err := parseStubStatus([]byte(page)); err == nil {
			t.Errorf("%s: parseStubStatus = %+v, want an error", name, st)
		}
	}
}

func TestConnsBetween(t *testing.T) {
	// Each read is a connection of its own: the first is in before, the
	// second in after and not the run's.
	if n, err := connsBetween(100, 165); n != 64 || err != nil {
		t.Errorf("connsBetween(100, 165) = %d, %v; want 64, nil", n, err)
	}
	if n, err := connsBetween(100, 101); n != 0 || err != nil {
		t.Errorf("connsBetween(100, 101) = %d, %v; want 0, nil", n, err)
	}
	for _, after := range []int64{100, 3} {
		if n, err := connsBetween(100, after); err == nil {
			t.Errorf("connsBetween(100, %d) = %d, want an error", after, n)
		}
	}
}

func TestUpstreamPer1k(t *testing.T) {
	at := func(requests, conns int64) sample {
		return sample{wrkResult: wrkResult{requests: requests, duration: time.Second}, upConns: conns}
	}
	row := loadRow{samples: []sample{at(30000, 30012), at(20000, 20100), at(10000, 10002)}}
	if got := row.stats().upstreamPer1k; math.Abs(got-1000.4) > 1e-9 {
		t.Errorf("median of 1000.4, 1005 and 1000.2 = %v, want 1000.4", got)
	}
	// One round not counted: the figure is unknown, shown as ?, not a
	// median of the rest nor 0.
	row.samples[1].upConns = -1
	got := row.stats().upstreamPer1k
	if !math.IsNaN(got) {
		t.Errorf("with a round not counted = %v, want NaN", got)
	}
	if s := fmtPer1k(got); s != "?" {
		t.Errorf("fmtPer1k(NaN) = %q, want ?", s)
	}
	for x, want := range map[float64]string{0: "0.00", 0.43: "0.43", 21.33: "21.3", 1000.4: "1000"} {
		if s := fmtPer1k(x); s != want {
			t.Errorf("fmtPer1k(%v) = %q, want %q", x, s, want)
		}
	}
}
