package observe

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/proxy"
)

func TestRecorder(t *testing.T) {
	r := NewRecorder()
	peer := &proxy.Peer{Addr: "127.0.0.1:1", Upstream: "api"}
	now := time.Now()
	try := func(wait time.Duration, status int, err *fault.Error) {
		r.Try(&proxy.Attempt{Peer: peer, Start: now, Duration: wait, Wait: wait, Status: status, Err: err})
	}
	// 100 answered tries, 1ms to 100ms, and three failures: two retried.
	for i := 1; i <= 100; i++ {
		try(time.Duration(i)*time.Millisecond, 200, nil)
	}
	refused := &fault.Error{Kind: fault.ConnectRefused, Source: fault.Upstream, Retry: true, Why: "nothing sent"}
	try(0, 0, refused)
	try(0, 0, refused)
	try(5*time.Millisecond, 503, &fault.Error{Kind: fault.UpstreamStatus, Status: 503, Source: fault.Upstream, Why: "no tries left"})
	try(0, 0, &fault.Error{Kind: fault.ClientClosed, Source: fault.Downstream}) // not the server's
	r.Try(&proxy.Attempt{Err: refused})                                         // no peer: ignored

	s := r.Snapshot(r.Server("api", "127.0.0.1:1"), now.Add(time.Second))
	if s.Tries != 103 || s.Failures != 3 || s.Retries != 2 {
		t.Fatalf("tries %d failures %d retries %d, want 103 3 2", s.Tries, s.Failures, s.Retries)
	}
	if s.TriesPerSecond <= 0 || s.FailuresPerSecond <= 0 || s.RetriesPerSecond <= 0 {
		t.Errorf("rates %v %v %v, want above 0", s.TriesPerSecond, s.FailuresPerSecond, s.RetriesPerSecond)
	}
	if s.Reasons["connect_refused"] != 2 || s.Reasons["http_503"] != 1 || len(s.Reasons) != 2 {
		t.Errorf("reasons %v", s.Reasons)
	}
	// Buckets are √2 apart: an estimate is within a factor √2 of the truth.
	l := s.Latency
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p50", l.P50, 50}, {"p90", l.P90, 90}, {"p99", l.P99, 99}} {
		if c.got < c.want/math.Sqrt2 || c.got > c.want*math.Sqrt2 {
			t.Errorf("%s = %.1fms, want about %.0fms", c.name, c.got, c.want)
		}
	}
	if l.Samples != 101 {
		t.Errorf("latency samples %d, want 101 (the tries with a response head)", l.Samples)
	}
	// The two refused tries are one kind, counted twice.
	if len(s.Recent) != 2 || s.Recent[0].Reason != "http_503" || s.Recent[1].Reason != "connect_refused" {
		t.Fatalf("recent %+v", s.Recent)
	}
	e := s.Recent[1]
	if !strings.HasPrefix(e.ProxyStatus, "sluice; error=") || !e.Retried || e.Decision != "nothing sent" || e.Error == "" || e.Count != 2 {
		t.Errorf("recent failure %+v", e)
	}
	if s.Recent[0].Count != 1 {
		t.Errorf("the 503's count %d, want 1", s.Recent[0].Count)
	}

	// A minute on, the window is empty but the totals stay.
	later := r.Snapshot(r.Server("api", "127.0.0.1:1"), now.Add(Window+slotLength))
	if later.Tries != 103 || later.TriesPerSecond != 0 || later.Latency.Samples != 0 {
		t.Errorf("a minute later: %d tries, %v/s, %d samples; want 103, 0, 0", later.Tries, later.TriesPerSecond, later.Latency.Samples)
	}

	r.Retain(func(up, addr string) bool { return false })
	if r.Server("api", "127.0.0.1:1") != nil {
		t.Error("Retain kept a server it was told to forget")
	}
	try(time.Millisecond, 200, nil)
	if s := r.Snapshot(r.Server("api", "127.0.0.1:1"), now); s.Tries != 1 {
		t.Errorf("after Retain, a new try: %d tries, want 1", s.Tries)
	}
}

func TestRecorderKeepsTheLastFailures(t *testing.T) {
	r := NewRecorder()
	peer := &proxy.Peer{Addr: "127.0.0.1:1", Upstream: "api"}
	start := time.Now()
	for i := range recentErrors + 5 {
		r.Try(&proxy.Attempt{Peer: peer, Start: start.Add(time.Duration(i) * time.Millisecond),
			Err: &fault.Error{Kind: fault.UpstreamStatus, Status: 500 + i, Source: fault.Upstream}})
	}
	s := r.Snapshot(r.Server("api", "127.0.0.1:1"), start)
	if len(s.Recent) != recentErrors || s.Recent[0].Reason != "http_520" || s.Recent[recentErrors-1].Reason != "http_505" {
		t.Fatalf("kept %d: newest %s, oldest %s; want %d, http_520, http_505",
			len(s.Recent), s.Recent[0].Reason, s.Recent[len(s.Recent)-1].Reason, recentErrors)
	}
}

// TestRecorderGroupsFailures: tries that fail alike (reason, Proxy-Status,
// decision) are one entry with a count, the first and last times and the
// last error text; one that recurs moves to the front, and a flood of one
// kind does not push the others out.
func TestRecorderGroupsFailures(t *testing.T) {
	r := NewRecorder()
	peer := &proxy.Peer{Addr: "127.0.0.1:1", Upstream: "api"}
	start := time.Now()
	at := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second) }
	refused := func(i int, why string, retry bool) {
		r.Try(&proxy.Attempt{Peer: peer, Start: at(i), Err: &fault.Error{Kind: fault.ConnectRefused, Source: fault.Upstream,
			Retry: retry, Why: why, Context: fmt.Sprintf("connecting from port %d", 40000+i)}})
	}
	const (
		retrying  = "retrying: nothing of the request reached the upstream"
		exhausted = "not retried: tries exhausted (3 of 3)"
	)
	refused(0, retrying, true)
	r.Try(&proxy.Attempt{Peer: peer, Start: at(1), Err: &fault.Error{Kind: fault.UpstreamStatus, Status: 503, Source: fault.Upstream}})
	for i := 2; i < 200; i++ {
		refused(i, retrying, true)
		refused(i, exhausted, false)
	}
	s := r.Snapshot(r.Server("api", "127.0.0.1:1"), at(200))
	if len(s.Recent) != 3 {
		t.Fatalf("%d entries, want 3 (retried, not retried, the 503): %+v", len(s.Recent), s.Recent)
	}
	first, second, third := s.Recent[0], s.Recent[1], s.Recent[2]
	if first.Decision != exhausted || first.Retried || first.Count != 198 || !first.First.Equal(at(2)) || !first.Time.Equal(at(199)) {
		t.Errorf("the most recent: %+v, want the 198 not retried, from %v to %v", first, at(2), at(199))
	}
	if second.Decision != retrying || !second.Retried || second.Count != 199 || !second.First.Equal(at(0)) {
		t.Errorf("second: %+v, want the 199 retried, from %v", second, at(0))
	}
	if !strings.Contains(second.Error, "port 40199") {
		t.Errorf("error text %q, want the last one's", second.Error)
	}
	if third.Reason != "http_503" || third.Count != 1 {
		t.Errorf("third: %+v, want the one 503", third)
	}
	if s.Failures != 1+2*198+1 || s.Reasons["connect_refused"] != 2*198+1 {
		t.Errorf("failures %d, reasons %v", s.Failures, s.Reasons)
	}
}

// TestRecorderAllocations: recording a try that succeeded allocates
// nothing once its peer was seen, so the status page costs the hot path
// no garbage.
func TestRecorderAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	r := NewRecorder()
	m := New(nil)
	m.Record(r)
	peer := &proxy.Peer{Addr: "127.0.0.1:1", Upstream: "api"}
	s := &proxy.Session{}
	a := &proxy.Attempt{Peer: peer, Start: time.Now(), Duration: time.Millisecond, Wait: time.Millisecond, Status: 200}
	m.Try(s, a)
	if n := testing.AllocsPerRun(1000, func() { m.Try(s, a) }); n != 0 {
		t.Fatalf("Try allocates %v times, want 0", n)
	}
}

func TestLatencyBuckets(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, latencyBase, 150 * time.Microsecond, time.Millisecond, time.Second, time.Hour} {
		i := latencyBucket(d)
		if i < 0 || i >= latencyBuckets {
			t.Fatalf("bucket(%v) = %d", d, i)
		}
		if i < latencyBuckets-1 && d > latencyBound(i) {
			t.Errorf("bucket(%v) = %d, whose bound is %v", d, i, latencyBound(i))
		}
		if i > 0 && d <= latencyBound(i-1) {
			t.Errorf("bucket(%v) = %d, but fits in %d", d, i, i-1)
		}
	}
}
