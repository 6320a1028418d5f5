package retry

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/internal/clock"
)

func up(k fault.Kind) *fault.Error { return fault.New(k, fault.Upstream, nil) }

func status(code int) *fault.Error {
	e := up(fault.UpstreamStatus)
	e.Status = code
	return e
}

// decide is the whole decision without a hook: Allow, then Enforce.
func decide(p *Policy, f Facts) (bool, string) {
	retry, why := p.Allow(&f)
	retry, why, _ = p.Enforce(&f, retry, why)
	return retry, why
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
		{"socket not found, POST", keyed, Facts{Method: "POST", Err: up(fault.ConnectNotFound), Try: 1, Replayable: true}, true, "nothing of the request"},
		{"connect timeout, GET", keyed, Facts{Method: "GET", Err: up(fault.ConnectTimeout), Try: 1, Replayable: true}, true, "nothing"},
		{"stale reused, GET", keyed, Facts{Method: "GET", Err: up(fault.ConnectionClosed), Reused: true, Wrote: 40, Try: 1, Replayable: true}, true, "idempotent (stale pooled"},
		{"stale reused, POST", keyed, Facts{Method: "POST", Err: up(fault.ConnectionClosed), Reused: true, Wrote: 40, Try: 1, Replayable: true}, false, "POST without Idempotency-Key"},
		{"stale reused, keyed POST", keyed, Facts{Method: "POST", Keyed: true, Err: up(fault.ConnectionReset), Reused: true, Wrote: 40, Try: 1, Replayable: true}, true, "carries Idempotency-Key"},
		{"keyed POST, never", never, Facts{Method: "POST", Keyed: true, Err: up(fault.ConnectionClosed), Wrote: 40, Try: 1, Replayable: true}, false, "never"},
		{"POST, always", always, Facts{Method: "POST", Err: up(fault.ConnectionClosed), Wrote: 40, Try: 1, Replayable: true}, true, "always"},
		{"unknown method is not idempotent", keyed, Facts{Method: "PURGE", Err: up(fault.ConnectionClosed), Wrote: 40, Try: 1, Replayable: true}, false, "PURGE without"},
		{"PUT is idempotent", keyed, Facts{Method: "PUT", Err: up(fault.ResponseTimeout), Wrote: 40, Try: 1, Replayable: true}, true, "idempotent"},
		{"PATCH is not", keyed, Facts{Method: "PATCH", Err: up(fault.ResponseTimeout), Wrote: 40, Try: 1, Replayable: true}, false, "PATCH without"},
		{"503 not in on", keyed, Facts{Method: "GET", Err: status(503), Wrote: 40, Try: 1, Replayable: true}, false, "http_503 is not in retry.on"},
		{"503 in on", with503, Facts{Method: "GET", Err: status(503), Wrote: 40, Try: 1, Replayable: true}, true, "idempotent"},
		{"503 in on, POST", with503, Facts{Method: "POST", Err: status(503), Wrote: 40, Try: 1, Replayable: true}, false, "POST without"},
		{"invalid header not default", keyed, Facts{Method: "GET", Err: up(fault.InvalidResponse), Wrote: 40, Try: 1, Replayable: true}, false, "invalid_header is not in"},
		{"tries exhausted", keyed, Facts{Method: "GET", Err: up(fault.ConnectRefused), Try: 3, Replayable: true}, false, "tries exhausted (3 of 3)"},
		{"tries 1", one, Facts{Method: "GET", Err: up(fault.ConnectRefused), Try: 1, Replayable: true}, false, "tries exhausted (1 of 1)"},
		{"body not replayable", keyed, Facts{Method: "PUT", Err: up(fault.ConnectionReset), Wrote: 40, Try: 1}, false, "body_buffer"},
		{"response started", keyed, Facts{Method: "GET", Err: up(fault.ConnectionReset), Wrote: 40, SentDownstream: true, Try: 1, Replayable: true}, false, "had started"},
		{"retry timeout", &Policy{Timeout: time.Second}, Facts{Method: "GET", Err: up(fault.ConnectRefused), Try: 1, Elapsed: 2 * time.Second, Replayable: true}, false, "retry timeout 1s"},
		{"default retry timeout", keyed, Facts{Method: "GET", Err: up(fault.ResponseTimeout), Wrote: 40, Try: 1, Elapsed: DefaultTimeout, Replayable: true}, false, "retry timeout 1m0s"},
		{"no retry timeout", &Policy{Timeout: -1}, Facts{Method: "GET", Err: up(fault.ResponseTimeout), Wrote: 40, Try: 1, Elapsed: time.Hour, Replayable: true}, true, "idempotent"},
		{"body truncated is never retried", keyed, Facts{Method: "GET", Err: up(fault.BodyTruncated), Wrote: 40, Try: 1, Replayable: true}, false, "body_truncated is not"},
		{"client failed", keyed, Facts{Method: "GET", Err: fault.New(fault.ClientClosed, fault.Downstream, nil), Source: fault.Downstream, Wrote: 40, Try: 1, Replayable: true}, false, "client_closed is not in"},
		{"certificate error, POST", keyed, Facts{Method: "POST", Err: up(fault.TLSCertificate), Try: 1, Replayable: true}, true, "nothing of the request"},
		{"handshake failed, POST", never, Facts{Method: "POST", Err: up(fault.TLSHandshake), Try: 1, Replayable: true}, true, "nothing of the request"},
		{"handshake refused late, POST", never, Facts{Method: "POST", Err: up(fault.TLSAlert), Wrote: 60, Try: 1, Replayable: true}, true, "refused the TLS handshake"},
		{"alert on a reused connection, POST", keyed, Facts{Method: "POST", Err: up(fault.TLSAlert), Reused: true, Wrote: 60, Try: 1, Replayable: true}, false, "POST without Idempotency-Key"},
		{"alert after response bytes, POST", keyed, Facts{Method: "POST", Err: up(fault.TLSAlert), Wrote: 60, Read: 10, Try: 1, Replayable: true}, false, "POST without Idempotency-Key"},
		{"TLS failure, retries off", &Policy{On: OnTimeout}, Facts{Method: "GET", Err: up(fault.TLSCertificate), Try: 1, Replayable: true}, false, "error is not in retry.on"},
		{"sluice out of descriptors", keyed, Facts{Method: "GET", Err: fault.New(fault.Exhausted, fault.Internally, nil), Source: fault.Internally, Try: 1, Replayable: true}, false, "sluice itself failed (local_resources_exhausted), not the upstream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			retry, why := decide(tt.p, tt.f)
			if retry != tt.retry || !strings.Contains(why, tt.why) {
				t.Fatalf("decision = %v, %q; want %v, ...%q...", retry, why, tt.retry, tt.why)
			}
		})
	}
}

// TestEnforceHardLimits forces a retry, as a hook may, against each hard
// limit: none of them gives way, and each says which it was.
func TestEnforceHardLimits(t *testing.T) {
	ok := Facts{Method: "POST", Err: up(fault.ConnectionReset), Wrote: 1 << 20, Try: 1, Replayable: true}
	empty := NewBudget(0, 0, nil)
	tests := []struct {
		name  string
		p     *Policy
		f     func(*Facts)
		limit Limit
		why   string
	}{
		{"nothing binds", &Policy{}, func(*Facts) {}, NoLimit, "hook says so"},
		{"response started", &Policy{}, func(f *Facts) { f.SentDownstream = true }, LimitDownstream, "had started"},
		{"client failed", &Policy{}, func(f *Facts) { f.Source = fault.Downstream }, LimitClient, "client side failed"},
		{"out of descriptors", &Policy{}, func(f *Facts) { f.Source, f.Err = fault.Internally, fault.New(fault.Exhausted, fault.Internally, nil) },
			LimitLocal, "sluice itself failed (local_resources_exhausted)"},
		{"body not held", &Policy{}, func(f *Facts) { f.Replayable = false }, LimitBody, "body_buffer"},
		{"tries", &Policy{Tries: 2}, func(f *Facts) { f.Try = 2 }, LimitTries, "tries exhausted (2 of 2)"},
		{"time", &Policy{Timeout: time.Second}, func(f *Facts) { f.Elapsed = time.Second }, LimitTime, "retry timeout 1s"},
		{"budget", &Policy{Budget: empty}, func(*Facts) {}, LimitBudget, "budget exhausted"},
		{"at most once, may have been processed", &Policy{NonIdempotent: Always}, func(f *Facts) { f.Once = true }, LimitOnce, "at most once"},
		{"at most once, nothing sent", &Policy{}, func(f *Facts) { f.Once, f.Wrote = true, 0 }, NoLimit, "hook says so"},
		{"at most once, refused stream", &Policy{}, func(f *Facts) { f.Once, f.Err = true, up(fault.Refused) }, NoLimit, "hook says so"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := ok
			tt.f(&f)
			retry, why, limit := tt.p.Enforce(&f, true, "hook says so")
			if retry != (tt.limit == NoLimit) || limit != tt.limit || !strings.Contains(why, tt.why) {
				t.Fatalf("Enforce = %v, %q, %v; want limit %v, ...%q...", retry, why, limit, tt.limit, tt.why)
			}
		})
	}
	// A refusal stays a refusal, with its own reason.
	if retry, why, limit := (&Policy{}).Enforce(&ok, false, "policy says no"); retry || why != "policy says no" || limit != NoLimit {
		t.Fatalf("Enforce of a refusal = %v, %q, %v", retry, why, limit)
	}
	if empty.Denied() != 1 {
		t.Fatalf("empty budget denied %d, want 1", empty.Denied())
	}
}

func TestDefaultBudget(t *testing.T) {
	// The zero Policy has the binary's budget: 20% of requests plus 10
	// per second over ten seconds.
	p := &Policy{}
	f := Facts{Method: "GET", Err: up(fault.ConnectRefused), Try: 1, Replayable: true}
	for i := 0; i < 1000; i++ {
		p.Begin(clock.Now())
	}
	allowed := 0
	for i := 0; i < 1000; i++ {
		if retry, _, _ := p.Enforce(&f, true, ""); retry {
			allowed++
		}
	}
	if allowed != 300 || p.Denied() != 700 {
		t.Fatalf("default budget allowed %d, denied %d; want 300 and 700", allowed, p.Denied())
	}
	// nil stands for one shared zero Policy: it has a budget too.
	var none *Policy
	none.Begin(clock.Now())
	if retry, _, _ := none.Enforce(&f, true, ""); !retry {
		t.Fatal("nil policy refused the first retry")
	}
}

func TestStaleAndExcludes(t *testing.T) {
	tests := []struct {
		name            string
		reused          bool
		wrote, read     int64
		err             *fault.Error
		stale, excludes bool
	}{
		{"reused, closed before a byte", true, 40, 0, up(fault.ConnectionClosed), true, false},
		{"reused, reset before a byte", true, 40, 0, up(fault.ConnectionReset), true, false},
		{"reused, write failed", true, 0, 0, up(fault.WriteError), true, false},
		{"reused, closed after a byte", true, 40, 1, up(fault.ConnectionClosed), false, false},
		{"new connection closed", false, 40, 0, up(fault.ConnectionClosed), false, false},
		{"reused, client went away", true, 40, 0, fault.New(fault.ConnectionClosed, fault.Downstream, nil), false, false},
		{"response timeout after sending", false, 40, 0, up(fault.ResponseTimeout), false, true},
		{"write timeout after a part", true, 10, 0, up(fault.WriteTimeout), false, true},
		{"write timeout before a byte", true, 0, 0, up(fault.WriteTimeout), false, false},
		{"connect timeout", false, 0, 0, up(fault.ConnectTimeout), false, false},
		{"503", true, 40, 100, status(503), false, false},
		{"certificate did not verify", false, 0, 0, up(fault.TLSCertificate), false, true},
		{"handshake refused with an alert", false, 0, 0, up(fault.TLSAlert), false, true},
		{"TLS 1.3 refusal after the request was written", false, 60, 0, up(fault.TLSAlert), false, true},
		{"handshake reset", false, 0, 0, up(fault.TLSHandshake), false, false},
	}
	for _, tt := range tests {
		f := Facts{Reused: tt.reused, Wrote: tt.wrote, Read: tt.read, Err: tt.err}
		if f.Stale() != tt.stale || Excludes(tt.wrote, tt.err) != tt.excludes {
			t.Errorf("%s: stale %v, excludes %v; want %v, %v", tt.name, f.Stale(), Excludes(tt.wrote, tt.err), tt.stale, tt.excludes)
		}
	}
}

func TestReuse(t *testing.T) {
	tests := []struct {
		p          *Policy
		method     string
		keyed      bool
		once       bool
		afterStale bool
		want       Reuse
	}{
		{nil, "GET", false, false, false, ReuseAny},
		{nil, "GET", false, false, true, ReuseNone},
		{nil, "POST", false, false, false, ReuseOnce},
		{nil, "POST", true, false, false, ReuseAny},
		{nil, "POST", true, true, false, ReuseOnce},
		{nil, "GET", false, true, false, ReuseOnce},
		{nil, "POST", false, false, true, ReuseNone},
		{&Policy{NonIdempotent: Never}, "POST", true, false, false, ReuseOnce},
		{&Policy{NonIdempotent: Always}, "PATCH", false, false, false, ReuseAny},
		{&Policy{NonIdempotent: Always}, "PATCH", false, true, false, ReuseOnce},
		{nil, "PURGE", false, false, false, ReuseOnce},
	}
	for _, tt := range tests {
		if got := tt.p.Reuse(tt.method, tt.keyed, tt.once, tt.afterStale); got != tt.want {
			t.Errorf("%v %s keyed=%v afterStale=%v: %v, want %v", tt.p.Mode(), tt.method, tt.keyed, tt.afterStale, got, tt.want)
		}
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

func TestBlame(t *testing.T) {
	upstream := &fault.Error{Kind: fault.ResponseTimeout, Source: fault.Upstream}
	client := &fault.Error{Kind: fault.ClientTimeout, Source: fault.Downstream}
	tests := []struct {
		name              string
		e                 *fault.Error
		clientGone, drain bool
		kind              fault.Kind
		source            fault.Source
	}{
		{"upstream's own", upstream, false, false, fault.ResponseTimeout, fault.Upstream},
		{"client gone", upstream, true, false, fault.ClientClosed, fault.Downstream},
		{"client gone as the drain passed", upstream, true, true, fault.ClientClosed, fault.Downstream},
		{"drain passed", upstream, false, true, fault.Drained, fault.Internally},
		{"the client's failure stays the client's", client, false, true, fault.ClientTimeout, fault.Downstream},
	}
	for _, tt := range tests {
		got := Blame(tt.e, tt.clientGone, tt.drain, "127.0.0.1:1")
		if got.Kind != tt.kind || got.Source != tt.source {
			t.Errorf("%s: %v from %v, want %v from %v", tt.name, got.Kind, got.Source, tt.kind, tt.source)
		}
		if got != tt.e && !errors.Is(got, tt.e) {
			t.Errorf("%s: the try's own error is not kept as the cause", tt.name)
		}
	}
}

func TestAgain(t *testing.T) {
	tests := []struct {
		b   Between
		ok  bool
		why string
	}{
		{Between{}, true, ""},
		{Between{Drained: true, CallExpired: true}, false, "drain timeout"},
		{Between{CallExpired: true}, false, "grpc-timeout"},
		{Between{Excluded: true, Peer: "10.0.0.1:80"}, false, "10.0.0.1:80"},
	}
	for _, tt := range tests {
		ok, why := Again(tt.b)
		if ok != tt.ok || !strings.Contains(why, tt.why) {
			t.Errorf("Again(%+v) = %v, %q; want %v and %q", tt.b, ok, why, tt.ok, tt.why)
		}
	}
}
