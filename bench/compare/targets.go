package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
)

// goal is one of the performance targets sluice is held to (issue 6),
// checked against the run that printed it, so that a miss is stated with
// its size next to the numbers it comes from.
type goal struct {
	scenario string  // the scenario it is measured in
	what     string  // the figure, as the table names it
	limit    float64 // the bound
	atLeast  bool    // the figure must be ≥ limit (else ≤ limit)
	// figure is what sluice's samples are divided by ref's, round by
	// round; nil for the idle scenarios, whose figure is bytes of RSS per
	// connection.
	figure func(sample) float64
	ref    string // the proxy sluice is held to; "" for nginx
}

var goals = []goal{
	{scenario: "small", what: "small GET: CPU per request ÷ nginx", limit: 1, figure: cpuPerRequest},
	{scenario: "small", what: "small GET: req/s ÷ nginx", limit: 1, atLeast: true, figure: reqPerSecond},
	{scenario: "small", what: "small GET: p99 ÷ nginx", limit: 1, figure: p99},
	{scenario: "1m", what: "1 MiB GET: CPU per MiB ÷ nginx", limit: 1, figure: cpuPerByte},
	{scenario: "1m", what: "1 MiB GET: MB/s ÷ nginx", limit: 1, atLeast: true, figure: bytesPerSecond},
	{scenario: "close", what: "conn per request: CPU per request ÷ nginx", limit: 1.2, figure: cpuPerRequest},
	{scenario: "idle", what: "idle keep-alive connection: RSS each", limit: 4096},
	{scenario: "tls-small", what: "TLS small GET: CPU per request ÷ nginx", limit: 1, figure: cpuPerRequest},
	{scenario: "tls-close", what: "TLS full handshake per request: CPU per request ÷ nginx", limit: 1.2, figure: cpuPerRequest},
	{scenario: "tls-resume", what: "TLS resumed handshake per request: CPU per request ÷ nginx", limit: 1, figure: cpuPerRequest},
	{scenario: "tls-1m", what: "TLS 1 MiB GET: MB/s ÷ nginx", limit: 1, atLeast: true, figure: bytesPerSecond},
	{scenario: "tls-idle", what: "idle TLS keep-alive connection: RSS each", limit: 8192},
	{scenario: "h2-small", what: "HTTP/2 small GET: CPU per request ÷ HAProxy", limit: 1, figure: cpuPerRequest, ref: "haproxy"},
	{scenario: "h3-small", what: "HTTP/3 small GET: CPU per request ÷ Caddy", limit: 0.7, figure: cpuPerRequest, ref: "caddy"},
	{scenario: "cache-small", what: "small hit: CPU per request ÷ nginx proxy_cache", limit: 1, figure: cpuPerRequest},
	{scenario: "cache-1m", what: "1 MiB hit: MB/s ÷ Varnish", limit: 1, atLeast: true, figure: bytesPerSecond, ref: "varnish"},
}

func p99(s sample) float64            { return float64(s.p99) }
func bytesPerSecond(s sample) float64 { return rate(s.bytes, s.duration) }
func cpuPerByte(s sample) float64     { return s.cpu / float64(max(s.bytes, 1)) }

// verdict is a goal checked: the figure measured, and by how much it
// misses the limit (0 when met; NaN when not measured).
type verdict struct {
	goal
	got    float64
	missBy float64 // a fraction of the limit
	// floor is the same figure for go-relay, the least a Go proxy does,
	// when it ran (NaN otherwise): a limit below it is out of reach of a
	// proxy built as sluice is, whatever sluice's own work costs.
	floor float64
}

func check(g goal, got float64) verdict {
	v := verdict{goal: g, got: got, missBy: math.NaN(), floor: math.NaN()}
	switch {
	case math.IsNaN(got):
	case g.atLeast:
		v.missBy = max(0, (g.limit-got)/g.limit)
	default:
		v.missBy = max(0, (got-g.limit)/g.limit)
	}
	return v
}

// verdicts checks every goal whose scenario ran with both sluice and the
// proxy it is held to, nginx or another (idle scenarios: with sluice).
func verdicts(loads []loadRow, idles []idleRow) []verdict {
	var out []verdict
	for _, g := range goals {
		if g.figure == nil {
			for _, r := range idles {
				if r.sc.name == g.scenario && r.name == "sluice" && len(r.samples) > 0 {
					out = append(out, check(g, r.bytesPerConn()))
				}
			}
			continue
		}
		var s, n, floor *loadRow
		for i := range loads {
			switch r := &loads[i]; {
			case r.sc.name != g.scenario:
			case r.name == "sluice":
				s = r
			case r.name == cmp.Or(g.ref, "nginx"):
				n = r
			case r.name == "go-relay" && len(r.samples) > 0:
				floor = r
			}
		}
		if s != nil && n != nil {
			v := check(g, pairedRatio(s.samples, n.samples, g.figure))
			if floor != nil {
				v.floor = pairedRatio(floor.samples, n.samples, g.figure)
			}
			out = append(out, v)
		}
	}
	return out
}

func (b *bench) targetTable(w io.Writer, vs []verdict) {
	fmt.Fprintf(w, "\n### Targets\n\n")
	fmt.Fprintln(w, "| target | wanted | measured | | go-relay (the Go floor) |")
	fmt.Fprintln(w, "|---|--:|--:|---|--:|")
	for _, v := range vs {
		op := "≤"
		if v.atLeast {
			op = "≥"
		}
		want, got := fmt.Sprintf("%s %.2f", op, v.limit), fmtFloat(v.got, "%.2f")
		if v.figure == nil {
			want, got = fmt.Sprintf("%s %s", op, fmtBytes(v.limit)), fmtBytes(v.got)
			if math.IsNaN(v.got) {
				got = "—"
			}
		}
		res := "met"
		switch {
		case math.IsNaN(v.missBy):
			res = "not measured"
		case v.missBy > 0 && v.missBy < 0.01:
			res = "missed by <1%"
		case v.missBy > 0:
			res = fmt.Sprintf("missed by %.0f%%", 100*v.missBy)
		}
		floor := "—"
		if !math.IsNaN(v.floor) {
			floor = fmt.Sprintf("%.2f", v.floor)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", v.what, want, got, res, floor)
	}
}
