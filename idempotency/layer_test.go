package idempotency

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// newLayer makes a layer for the route "*/api/" with o's other options.
func newLayer(t testing.TB, o Options) *Layer {
	t.Helper()
	if o.Name == "" {
		o.Name = "*/api/"
	}
	if o.Log == nil {
		o.Log = quietLog
	}
	l, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// req is a request of method to target with key (none if "") and body,
// from 192.0.2.1, with Host api.example.com and the extra fields kv.
func req(method, target, key, body string, kv ...string) *Request {
	var h h1.Header
	h.Add("Host", "api.example.com")
	if key != "" {
		h.Add("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	d := new(BodyDigest)
	d.Write([]byte(body))
	return &Request{Method: method, Target: []byte(target), Header: &h,
		ClientIP: netip.MustParseAddr("192.0.2.1"), Body: d}
}

func post(key, body string, kv ...string) *Request {
	return req("POST", "/api/orders", key, body, kv...)
}

// begin runs Begin and checks its outcome.
func begin(t *testing.T, l *Layer, r *Request, want Outcome) Decision {
	t.Helper()
	d := l.Begin(context.Background(), r)
	if d.Outcome != want {
		detail := ""
		if d.Answer != nil {
			detail = string(d.Answer.Body)
		}
		t.Fatalf("Begin: %v (%v) %s, want %v", d.Outcome, d.Err, detail, want)
	}
	if (d.Claim != nil) != (want == Claimed || want == Retaken) || d.Forward() != (d.Answer == nil) {
		t.Fatalf("Begin: %v with claim %v, answer %v", d.Outcome, d.Claim != nil, d.Answer != nil)
	}
	return d
}

// checkProblem checks one of the layer's own answers.
func checkProblem(t *testing.T, d Decision, status int, name, errorType string) {
	t.Helper()
	a := d.Answer
	if a == nil || a.Status != status || !strings.Contains(string(a.Body), `"type":"`+ProblemBase+name+`"`) ||
		!strings.HasPrefix(string(a.Header.Get("Proxy-Status")), "sluice; error="+errorType+"; details=") {
		t.Fatalf("answer %+v, want %d %s (%s)", a, status, name, errorType)
	}
}

// checkReplay checks that d replays a: every byte of it, and the
// Idempotent-Replayed field last.
func checkReplay(t *testing.T, d Decision, a *Answer) {
	t.Helper()
	got := d.Answer
	if got.Status != a.Status || got.Reason != a.Reason || string(got.Body) != string(a.Body) ||
		got.Header.String() != a.Header.String()+"Idempotent-Replayed: true\r\n" || got.Trailer.String() != a.Trailer.String() {
		t.Fatalf("replayed %d %q\n%s%q\n%s\nwant %d %q\n%s%q\n%s", got.Status, got.Reason, got.Header.String(), got.Body, got.Trailer.String(),
			a.Status, a.Reason, a.Header.String(), a.Body, a.Trailer.String())
	}
}

func checkCounts(t *testing.T, l *Layer, want Counts) {
	t.Helper()
	if got := l.Counts(); got != want {
		t.Errorf("counts %+v\nwant   %+v", got, want)
	}
}

// TestPass checks the requests the layer leaves alone.
func TestPass(t *testing.T) {
	l := newLayer(t, Options{})
	begin(t, l, req("GET", "/api/orders", "k", ""), Pass)
	begin(t, l, req("PUT", "/api/orders", "k", "x"), Pass)
	begin(t, l, post("", "x"), Pass)
	begin(t, l, post("", "x", "Idempotency-Keys", "k"), Pass)
	checkCounts(t, l, Counts{})
}

// TestInvalidKey checks the 400s.
func TestInvalidKey(t *testing.T) {
	l := newLayer(t, Options{Required: true, Methods: []string{"POST", "DELETE"}})
	checkProblem(t, begin(t, l, post("", "x"), Missing), 400, "idempotency-key-missing", "http_request_error")
	checkProblem(t, begin(t, l, req("DELETE", "/api/x", "", ""), Missing), 400, "idempotency-key-missing", "http_request_error")
	begin(t, l, req("GET", "/api/orders", "", ""), Pass) // not a method handled
	for _, r := range []*Request{
		post(strings.Repeat("k", 256), "x"),
		post("bad\x01key", "x"),
		post(`"unterminated`, "x"),
		post("k", "x", "Idempotency-Key", "k"),
	} {
		d := begin(t, l, r, Invalid)
		checkProblem(t, d, 400, "idempotency-key-invalid", "http_request_error")
		var ke *KeyError
		if !errors.As(d.Err, &ke) {
			t.Errorf("Err %v, want a *KeyError", d.Err)
		}
	}
	checkCounts(t, l, Counts{Invalid: 6})
}

// TestKeepAndReplay follows a key from its claim to its replays: 409
// while the first runs, 422 for another payload at any time, the kept
// answer byte for byte after.
func TestKeepAndReplay(t *testing.T) {
	l := newLayer(t, Options{})
	first := begin(t, l, post("k1", `{"n":1}`), Claimed)

	d := begin(t, l, post("k1", `{"n":1}`), InFlight)
	checkProblem(t, d, 409, "idempotency-key-in-use", "http_request_denied")
	if ra := string(d.Answer.Header.Get("Retry-After")); ra != "1" {
		t.Errorf("409 Retry-After %q, want 1", ra)
	}
	checkProblem(t, begin(t, l, post("k1", `{"n":2}`), Mismatch), 422, "idempotency-key-reused", "http_request_denied")

	a := sample()
	if err := first.Claim.Keep(a); err != nil {
		t.Fatal(err)
	}
	a = sample() // Keep may have been given a buffer to reuse
	checkReplay(t, begin(t, l, post("k1", `{"n":1}`), Replayed), a)
	checkReplay(t, begin(t, l, post("k1", `{"n":1}`), Replayed), a)
	checkProblem(t, begin(t, l, post("k1", `{"n":2}`), Mismatch), 422, "idempotency-key-reused", "http_request_denied")
	checkProblem(t, begin(t, l, req("POST", "/api/other", "k1", `{"n":1}`), Mismatch), 422, "idempotency-key-reused", "http_request_denied")
	checkProblem(t, begin(t, l, req("PATCH", "/api/orders", "k1", `{"n":1}`), Mismatch), 422, "idempotency-key-reused", "http_request_denied")
	// The quoted form of the same key is the same key.
	checkReplay(t, begin(t, l, post(`"k1"`, `{"n":1}`), Replayed), a)
	// Another key, and the same key of another client, are other keys.
	begin(t, l, post("k2", `{"n":1}`), Claimed).Claim.Release()
	other := post("k1", `{"n":1}`)
	other.ClientIP = netip.MustParseAddr("192.0.2.2")
	begin(t, l, other, Claimed).Claim.Release()

	if err := first.Claim.Keep(a); err != ErrEnded {
		t.Errorf("a second end: %v, want ErrEnded", err)
	}
	if err := first.Claim.Unknown(); err != ErrEnded {
		t.Errorf("a third end: %v, want ErrEnded", err)
	}
	checkCounts(t, l, Counts{Claimed: 3, Replayed: 3, Conflicts: 1, Mismatches: 4, Kept: 1, Released: 2})
}

// TestRelease checks the ends that free a key: Release, and an answer
// of a status in the release set.
func TestRelease(t *testing.T) {
	l := newLayer(t, Options{})
	begin(t, l, post("k", "x"), Claimed).Claim.Release()
	for _, status := range []int{500, 502, 503, 504, 429, 408, 425} {
		d := begin(t, l, post("k", "x"), Claimed)
		if err := d.Claim.Keep(&Answer{Status: status, Body: []byte("try again")}); err != nil {
			t.Fatal(err)
		}
	}
	// A status kept by default: 4xx other than those.
	begin(t, l, post("k", "x"), Claimed).Claim.Keep(&Answer{Status: 404})
	begin(t, l, post("k", "x"), Replayed)
	checkCounts(t, l, Counts{Claimed: 9, Released: 8, Kept: 1, Replayed: 1})

	// release_statuses: [] keeps every answer, 503 included.
	l = newLayer(t, Options{Release: new(StatusSet)})
	begin(t, l, post("k", "x"), Claimed).Claim.Keep(&Answer{Status: 503})
	if d := begin(t, l, post("k", "x"), Replayed); d.Answer.Status != 503 {
		t.Errorf("replayed %d, want 503", d.Answer.Status)
	}
}

// TestUnknown checks that a request whose outcome is unknown is said to
// be (502) and not sent again, or, with UnknownOutcome Forward, sent again
// under a new claim.
func TestUnknown(t *testing.T) {
	l := newLayer(t, Options{})
	begin(t, l, post("k", "x"), Claimed).Claim.Unknown()
	for range 2 {
		checkProblem(t, begin(t, l, post("k", "x"), Unknown), 502, "idempotency-outcome-unknown", "http_response_incomplete")
	}
	checkProblem(t, begin(t, l, post("k", "y"), Mismatch), 422, "idempotency-key-reused", "http_request_denied")
	checkCounts(t, l, Counts{Claimed: 1, Unknown: 1, UnknownRefused: 2, Mismatches: 1})

	l = newLayer(t, Options{UnknownOutcome: Forward})
	begin(t, l, post("k", "x"), Claimed).Claim.Unknown()
	d := begin(t, l, post("k", "x"), Retaken)
	begin(t, l, post("k", "x"), InFlight)
	d.Claim.Keep(sample())
	checkReplay(t, begin(t, l, post("k", "x"), Replayed), sample())
	checkCounts(t, l, Counts{Claimed: 2, Retaken: 1, Unknown: 1, Conflicts: 1, Kept: 1, Replayed: 1})
}

// TestNotKept checks an answer larger than MaxResponse: not kept, and a
// retry gets 409 without Retry-After (retrying will not help).
func TestNotKept(t *testing.T) {
	l := newLayer(t, Options{MaxResponse: 1024})
	begin(t, l, post("big", "x"), Claimed).Claim.Keep(&Answer{Status: 200, Body: make([]byte, 1024)})
	d := begin(t, l, post("big", "x"), NotKept)
	checkProblem(t, d, 409, "idempotency-answer-not-kept", "http_request_denied")
	if d.Answer.Header.Has("Retry-After") {
		t.Error("a 409 for an answer not kept has Retry-After")
	}
	begin(t, l, post("small", "x"), Claimed).Claim.Keep(&Answer{Status: 200, Body: make([]byte, 900)})
	begin(t, l, post("small", "x"), Replayed)
	// A big 5xx still frees the key.
	begin(t, l, post("big5", "x"), Claimed).Claim.Keep(&Answer{Status: 500, Body: make([]byte, 4096)})
	begin(t, l, post("big5", "x"), Claimed).Claim.Release()
	checkCounts(t, l, Counts{Claimed: 4, NotKept: 1, Conflicts: 1, Kept: 1, Replayed: 1, Released: 2})
}

// failing is a store that fails every call, as a Redis that is down.
type failing struct{}

var errDown = errors.New("redis: dial tcp 127.0.0.1:1: connection refused")

func (failing) Begin(context.Context, Key, Fingerprint, Token, Terms) (Found, error) {
	return Found{}, errDown
}
func (failing) Renew(context.Context, []Held, Terms) ([]bool, error) { return nil, errDown }
func (failing) End(context.Context, Key, Fingerprint, Token, State, []byte, Terms) (State, error) {
	return StateNone, errDown
}

func TestStoreError(t *testing.T) {
	l := newLayer(t, Options{Store: failing{}})
	d := begin(t, l, post("k", "x"), StoreDenied)
	checkProblem(t, d, 503, "idempotency-store-unavailable", "proxy_internal_error")
	if !errors.Is(d.Err, errDown) || string(d.Answer.Header.Get("Retry-After")) != "1" {
		t.Errorf("Err %v, Retry-After %q", d.Err, d.Answer.Header.Get("Retry-After"))
	}
	begin(t, l, post("", "x"), Pass) // no key: the store is not asked
	checkCounts(t, l, Counts{StoreErrors: 1})

	l = newLayer(t, Options{Store: failing{}, OnStoreError: Allow})
	if d := begin(t, l, post("k", "x"), Bypassed); !errors.Is(d.Err, errDown) {
		t.Errorf("Err %v", d.Err)
	}
	checkCounts(t, l, Counts{StoreErrors: 1, Bypassed: 1})
}

// lateReply is a store whose Begin does what it is asked and then fails,
// as a Redis whose reply came after the timeout.
type lateReply struct{ *Local }

var errLate = errors.New("redis: context deadline exceeded")

func (s lateReply) Begin(ctx context.Context, k Key, fp Fingerprint, tok Token, t Terms) (Found, error) {
	s.Local.Begin(ctx, k, fp, tok, t)
	return Found{}, errLate
}

// TestStoreErrorUnclaims checks that a claim a failed Begin made all the
// same is undone: the request was not forwarded, so its retry must be
// claimed, not refused as in flight or, once the lease ran out, as an
// unknown outcome; and that an unclaim touches no other holder's claim.
func TestStoreErrorUnclaims(t *testing.T) {
	for _, action := range []StoreAction{Deny, Allow} {
		store := NewLocal(0, 0)
		l := newLayer(t, Options{Store: lateReply{store}, OnStoreError: action})
		want := StoreDenied
		if action == Allow {
			want = Bypassed
		}
		begin(t, l, post("k", "x"), want)
		<-l.Close() // the unclaim ran
		retry := newLayer(t, Options{Store: store})
		begin(t, retry, post("k", "x"), Claimed).Claim.Keep(sample())
		checkReplay(t, begin(t, retry, post("k", "x"), Replayed), sample())
	}

	// Another request's claim stands.
	store := NewLocal(0, 0)
	holder := newLayer(t, Options{Store: store})
	d := begin(t, holder, post("k", "x"), Claimed)
	late := newLayer(t, Options{Store: lateReply{store}})
	begin(t, late, post("k", "x"), StoreDenied)
	<-late.Close()
	begin(t, holder, post("k", "x"), InFlight)
	d.Claim.Keep(sample())
	begin(t, holder, post("k", "x"), Replayed)
}

// TestScopeHeader checks a key scoped by a credential: another
// credential, or none, is another key.
func TestScopeHeader(t *testing.T) {
	l := newLayer(t, Options{Scope: []Scope{ScopeHeader("Authorization")}})
	d := begin(t, l, post("k", "x", "Authorization", "Bearer alice"), Claimed)
	begin(t, l, post("k", "x", "Authorization", "Bearer alice"), InFlight)
	begin(t, l, post("k", "x", "Authorization", "Bearer bob"), Claimed).Claim.Release()
	begin(t, l, post("k", "x"), Claimed).Claim.Release()
	// Another client address, the same credential: the same key.
	r := post("k", "x", "Authorization", "Bearer alice")
	r.ClientIP = netip.MustParseAddr("198.51.100.7")
	begin(t, l, r, InFlight)
	d.Claim.Release()
}

// TestRecorder streams an answer through a Recorder and checks what is
// kept: the end-to-end fields, the whole body, the trailers.
func TestRecorder(t *testing.T) {
	l := newLayer(t, Options{MaxResponse: 4096})
	d := begin(t, l, post("k", "x"), Claimed)
	rec := d.Claim.Recorder()
	var h h1.Header
	h.Add("Content-Type", "text/plain")
	h.Add("Connection", "keep-alive")
	h.Add("Transfer-Encoding", "chunked")
	h.Add("X-B", "2")
	rec.Head(200, []byte("Fine"), &h, 0)
	h.Reset() // the engine's header may be reused at once
	for _, p := range []string{"he", "llo", "", " world"} {
		rec.Body([]byte(p))
	}
	var tr h1.Header
	tr.Add("X-Sum", "abc")
	rec.Trailers(&tr)
	if err := rec.End(); err != nil {
		t.Fatal(err)
	}
	want := &Answer{Status: 200, Reason: "Fine", Body: []byte("hello world")}
	want.Header.Add("Content-Type", "text/plain")
	want.Header.Add("X-B", "2")
	want.Trailer.Add("X-Sum", "abc")
	checkReplay(t, begin(t, l, post("k", "x"), Replayed), want)

	// Past max_response: not kept; with a size hint past it, too.
	for _, hint := range []int64{0, 5000} {
		rec = begin(t, l, post("big", "x"), Claimed).Claim.Recorder()
		rec.Head(200, nil, &h, hint)
		for range 5 {
			rec.Body(make([]byte, 1000))
		}
		if rec.enc != nil {
			t.Error("the recorder holds a body past max_response")
		}
		rec.End()
		begin(t, l, post("big", "x"), NotKept)
		l = newLayer(t, Options{MaxResponse: 4096})
	}

	// An answer cut off: outcome unknown; one cut off after a 503 head:
	// released; no head at all: unknown.
	rec = begin(t, l, post("cut", "x"), Claimed).Claim.Recorder()
	rec.Head(201, nil, &h, 100)
	rec.Body([]byte("part"))
	rec.Abort()
	begin(t, l, post("cut", "x"), Unknown)
	rec = begin(t, l, post("cut503", "x"), Claimed).Claim.Recorder()
	rec.Head(503, nil, &h, 0)
	rec.Abort()
	begin(t, l, post("cut503", "x"), Claimed).Claim.Release()
	begin(t, l, post("nohead", "x"), Claimed).Claim.Recorder().End()
	begin(t, l, post("nohead", "x"), Unknown)
}

// TestClose checks that a closed layer's channel closes when its last
// claim ends, and not before.
func TestClose(t *testing.T) {
	l := newLayer(t, Options{})
	d := begin(t, l, post("k", "x"), Claimed)
	done := l.Close()
	select {
	case <-done:
		t.Fatal("closed with a claim live")
	default:
	}
	d.Claim.Keep(sample())
	<-done
	if l.Close() != done {
		t.Error("a second Close returned another channel")
	}
	idle := newLayer(t, Options{})
	<-idle.Close()
}

// TestCarry checks that a reload's new layer answers from the old one's
// local store, and goes on with its counts.
func TestCarry(t *testing.T) {
	old := newLayer(t, Options{})
	begin(t, old, post("k", "x"), Claimed).Claim.Keep(sample())
	running := begin(t, old, post("run", "x"), Claimed)
	l := newLayer(t, Options{})
	l.Carry(old)
	checkReplay(t, begin(t, l, post("k", "x"), Replayed), sample())
	begin(t, l, post("run", "x"), InFlight)
	<-func() <-chan struct{} { running.Claim.Keep(sample()); return old.Close() }()
	begin(t, l, post("run", "x"), Replayed)
	checkCounts(t, l, Counts{Claimed: 2, Kept: 2, Replayed: 2, Conflicts: 1})
}

func TestNewErrors(t *testing.T) {
	for _, o := range []Options{
		{Header: "Bad Header"},
		{Methods: []string{"post"}},
		{Methods: []string{"PO ST"}},
		{Scope: []Scope{{}}},
		{Scope: []Scope{ScopeHeader("a b")}},
		{TTL: 10, Lease: 20},
		{Lease: -1},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) took it", o)
		}
	}
}

// TestNoHeader checks a request handed without fields: no key, no panic.
func TestNoHeader(t *testing.T) {
	l := newLayer(t, Options{Required: true})
	begin(t, l, &Request{Method: "POST", Target: []byte("/")}, Missing)
	begin(t, newLayer(t, Options{}), &Request{Method: "POST"}, Pass)
}

// capture is a Local store that keeps a copy of the last answer it was
// given to keep.
type capture struct {
	*Local
	last []byte
}

func (c *capture) End(ctx context.Context, k Key, fp Fingerprint, tok Token, s State, answer []byte, t Terms) (State, error) {
	c.last = append([]byte(nil), answer...)
	return c.Local.End(ctx, k, fp, tok, s, answer, t)
}

// TestRecorderEncoding checks that a Recorder writes an answer as
// Answer.Encode does, whatever the size hint said of the body: right,
// none, too small or too large (its length then takes another number of
// bytes, and the body moves), with trailers and without.
func TestRecorderEncoding(t *testing.T) {
	store := &capture{Local: NewLocal(0, 0)}
	l := newLayer(t, Options{Store: store, MaxResponse: 1 << 20})
	var h h1.Header
	h.Add("Content-Type", "text/plain")
	h.Add("Connection", "close")
	h.Add("X-A", "1")
	for i, tt := range []struct {
		body     int
		hint     int64
		trailers bool
	}{
		{0, 0, false}, {11, 11, false}, {11, 0, true}, {200, 0, false}, {200, 5, true},
		{5, 200, false}, {5, 20000, true}, {20000, 100, false}, {20000, 20000, true}, {100, -1, false},
	} {
		body := bytes.Repeat([]byte{'a' + byte(i)}, tt.body)
		want := &Answer{Status: 201, Reason: "Created", Body: body}
		want.Header.Add("Content-Type", "text/plain")
		want.Header.Add("X-A", "1")
		var tr h1.Header
		if tt.trailers {
			tr.Add("X-Sum", "abc")
			tr.Add("TE", "x")
			want.Trailer.Add("X-Sum", "abc")
		}
		key := "enc" + strconv.Itoa(i)
		rec := begin(t, l, post(key, "x"), Claimed).Claim.Recorder()
		rec.Head(201, []byte("Created"), &h, tt.hint)
		for p := body; len(p) > 0; p = p[min(len(p), 7):] {
			rec.Body(p[:min(len(p), 7)])
		}
		if tt.trailers {
			rec.Trailers(&tr)
		}
		if err := rec.End(); err != nil {
			t.Fatal(err)
		}
		if enc := want.Encode(nil); !bytes.Equal(store.last, enc) {
			t.Errorf("body %d, hint %d, trailers %v: kept %q, want %q", tt.body, tt.hint, tt.trailers, store.last, enc)
		}
		checkReplay(t, begin(t, l, post(key, "x"), Replayed), want)
	}
}
