package retry

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/fault"
)

func up(k fault.Kind) *fault.Error { return fault.New(k, fault.Upstream, nil) }

func status(code int) *fault.Error {
	e := up(fault.UpstreamStatus)
	e.Status = code
	return e
}

func TestDecide(t *testing.T) {
	keyed := &Policy{}
	never := &Policy{NonIdempotent: Never}
	always := &Policy{NonIdempotent: Always}
	with503 := &Policy{On: OnError | OnTimeout | OnHTTP503}
	one := &Policy{Tries: 1}
	tests := []struct {
		name  string
		p     *Policy
		f     Facts
		retry bool
		why   string // a substring of the reason
	}{
		{"connect refused, POST", keyed, Facts{Method: "POST", Err: up(fault.ConnectRefused), Try: 1, Replayable: true}, true, "nothing of the request"},
		{"connect timeout, GET", keyed, Facts{Method: "GET", Err: up(fault.ConnectTimeout), Try: 1, Replayable: true}, true, "nothing"},
		{"stale reused, GET", keyed, Facts{Method: "GET", Err: up(fault.ConnectionClosed), Reused: true, Wrote: true, Try: 1, Replayable: true}, true, "idempotent (reused"},
		{"stale reused, POST", keyed, Facts{Method: "POST", Err: up(fault.ConnectionClosed), Reused: true, Wrote: true, Try: 1, Replayable: true}, false, "POST without Idempotency-Key"},
		{"stale reused, keyed POST", keyed, Facts{Method: "POST", Keyed: true, Err: up(fault.ConnectionReset), Reused: true, Wrote: true, Try: 1, Replayable: true}, true, "carries Idempotency-Key"},
		{"keyed POST, never", never, Facts{Method: "POST", Keyed: true, Err: up(fault.ConnectionClosed), Wrote: true, Try: 1, Replayable: true}, false, "never"},
		{"POST, always", always, Facts{Method: "POST", Err: up(fault.ConnectionClosed), Wrote: true, Try: 1, Replayable: true}, true, "always"},
		{"unknown method is not idempotent", keyed, Facts{Method: "PURGE", Err: up(fault.ConnectionClosed), Wrote: true, Try: 1, Replayable: true}, false, "PURGE without"},
		{"PUT is idempotent", keyed, Facts{Method: "PUT", Err: up(fault.ResponseTimeout), Wrote: true, Try: 1, Replayable: true}, true, "idempotent"},
		{"PATCH is not", keyed, Facts{Method: "PATCH", Err: up(fault.ResponseTimeout), Wrote: true, Try: 1, Replayable: true}, false, "PATCH without"},
		{"503 not in on", keyed, Facts{Method: "GET", Err: status(503), Wrote: true, Try: 1, Replayable: true}, false, "http_503 is not in retry.on"},
		{"503 in on", with503, Facts{Method: "GET", Err: status(503), Wrote: true, Try: 1, Replayable: true}, true, "idempotent"},
		{"503 in on, POST", with503, Facts{Method: "POST", Err: status(503), Wrote: true, Try: 1, Replayable: true}, false, "POST without"},
		{"invalid header not default", keyed, Facts{Method: "GET", Err: up(fault.InvalidResponse), Wrote: true, Try: 1, Replayable: true}, false, "invalid_header is not in"},
		{"tries exhausted", keyed, Facts{Method: "GET", Err: up(fault.ConnectRefused), Try: 3, Replayable: true}, false, "tries exhausted (3 of 3)"},
		{"tries 1", one, Facts{Method: "GET", Err: up(fault.ConnectRefused), Try: 1, Replayable: true}, false, "tries exhausted (1 of 1)"},
		{"body not replayable", keyed, Facts{Method: "PUT", Err: up(fault.ConnectionReset), Wrote: true, Try: 1}, false, "body_buffer"},
		{"response started", keyed, Facts{Method: "GET", Err: up(fault.ConnectionReset), Wrote: true, SentDownstream: true, Try: 1, Replayable: true}, false, "had started"},
		{"retry timeout", &Policy{Timeout: time.Second}, Facts{Method: "GET", Err: up(fault.ConnectRefused), Try: 1, Elapsed: 2 * time.Second, Replayable: true}, false, "retry timeout"},
		{"body truncated is never retried", keyed, Facts{Method: "GET", Err: up(fault.BodyTruncated), Wrote: true, Try: 1, Replayable: true}, false, "body_truncated is not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			retry, why := Decide(tt.p, tt.f)
			if retry != tt.retry || !strings.Contains(why, tt.why) {
				t.Fatalf("Decide = %v, %q; want %v, ...%q...", retry, why, tt.retry, tt.why)
			}
		})
	}
}

func TestPolicyDefaults(t *testing.T) {
	var p *Policy
	if p.MaxTries() != 3 || p.Conditions() != OnError|OnTimeout || p.Header() != "Idempotency-Key" || p.BufferSize() != 64<<10 {
		t.Fatal("nil policy does not give the defaults")
	}
	if (&Policy{BodyBuffer: -1}).BufferSize() != 0 {
		t.Fatal("negative body buffer must keep nothing")
	}
	c, err := ParseConditions([]string{"error", "http_503"})
	if err != nil || c != OnError|OnHTTP503 || c.String() != "error http_503" {
		t.Fatalf("ParseConditions = %v %v", c, err)
	}
	if _, err := ParseCondition("http_501"); err == nil {
		t.Fatal("http_501 accepted")
	}
}

func TestBudget(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBudget(0.2, 0, func() time.Time { return now })
	for i := 0; i < 100; i++ {
		b.Request()
	}
	allowed := 0
	for i := 0; i < 50; i++ {
		if b.Withdraw() {
			allowed++
		}
	}
	if allowed != 20 || b.Denied() != 30 {
		t.Fatalf("allowed %d denied %d, want 20 and 30", allowed, b.Denied())
	}
	// Eleven seconds later the window has moved on: nothing is left.
	now = now.Add(11 * time.Second)
	if b.Withdraw() {
		t.Fatal("retry allowed with no requests in the window")
	}
	// The per-second reserve lets a quiet upstream retry a little.
	q := NewBudget(0.2, 1, func() time.Time { return now })
	n := 0
	for q.Withdraw() {
		n++
		if n > 100 {
			break
		}
	}
	if n != 10 {
		t.Fatalf("reserve allowed %d retries, want 10 (1/s over 10 s)", n)
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	max := func(n int64) int64 { return n - 1 }
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 30: time.Second} {
		if got := b.Delay(n, max); got != want {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want)
		}
	}
	if (Backoff{}).Delay(3, nil) != 0 {
		t.Error("zero backoff waits")
	}
}
