package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// Defaults of Options.
const (
	DefaultHeader      = "Idempotency-Key"
	DefaultTTL         = 24 * time.Hour
	DefaultLease       = 30 * time.Second
	DefaultMaxResponse = 1 << 20
	// DefaultMaxRequest bounds the request bodies of keyed requests, read
	// whole for their digest before they go upstream.
	DefaultMaxRequest = 1 << 20
)

// DefaultMethods are the methods whose keyed requests the layer handles
// when Options.Methods is nil.
var DefaultMethods = []string{"POST", "PATCH"}

// DefaultScope is what keys are scoped to when Options.Scope is nil.
var DefaultScope = []Scope{ScopeRoute, ScopeClientIP}

// StoreAction is what a Layer does with a request its store failed to
// decide.
type StoreAction uint8

const (
	// Deny answers the request 503 (the default): no keyed request goes
	// upstream unguarded.
	Deny StoreAction = iota
	// Allow forwards the request without the layer (counted as
	// bypassed): a store failure does not take the route down, and a
	// retry during it may be processed twice.
	Allow
)

// UnknownAction is what a Layer does with the retry of a request whose
// outcome is unknown (it may have been processed, and got no answer).
type UnknownAction uint8

const (
	// Refuse answers it 502 (the default), saying the outcome is
	// unknown: sluice does not guess.
	Refuse UnknownAction = iota
	// Forward forwards it under a new claim: for an upstream that
	// deduplicates on its own, or requests whose double processing is
	// better than none.
	Forward
)

// Options configure a Layer; the zero value of each field is its
// default.
type Options struct {
	// Name names the layer in logs and metrics, and is the value of
	// ScopeRoute: the route's host and path prefix in the config-built
	// proxy ("*/api/"). A fleet's instances must name a route alike.
	Name string
	// Header is the key's field; "" means DefaultHeader.
	Header string
	// Methods are the methods handled, upper case; nil means
	// DefaultMethods. A request of another method passes untouched.
	Methods []string
	// Required answers 400 to a request of Methods without the key,
	// instead of letting it pass.
	Required bool
	// Scope is what keys are scoped to besides themselves; nil means
	// DefaultScope. An empty, non-nil Scope shares every key among all
	// clients of every route with the same store.
	Scope []Scope
	// TTL is how long an ended request's record is kept (the answer
	// replayed, the outcome reported); 0 means DefaultTTL. It may not be
	// shorter than Lease.
	TTL time.Duration
	// Lease is how long a claim lives without its holder renewing it
	// (renewed every third of it while the request runs): the longest a
	// dead holder's key stays in flight; 0 means DefaultLease.
	Lease time.Duration
	// MaxResponse bounds the answers kept, in bytes (fields, body and
	// trailers); a larger one is not kept, and its key's retries get
	// 409. 0 means DefaultMaxResponse; < 0 keeps only answers of no
	// bytes (in practice none).
	MaxResponse int64
	// MaxRequest bounds the body of a keyed request, read whole for its
	// digest before it goes upstream; a larger one is answered 413. 0
	// means DefaultMaxRequest.
	MaxRequest int64
	// Release are the statuses whose answers are not kept and free the
	// key instead, so that a retry goes through; nil means
	// DefaultRelease().
	Release *StatusSet
	// Store keeps the records; nil means a Local store of its own with
	// the default bounds.
	Store Store
	// OnStoreError is what becomes of a request the store failed to
	// decide; Deny (503) by default.
	OnStoreError StoreAction
	// UnknownOutcome is what becomes of the retry of a request whose
	// outcome is unknown; Refuse (502) by default.
	UnknownOutcome UnknownAction
	// Log receives store failures, a line per 10 seconds at most; nil
	// means slog.Default().
	Log *slog.Logger
}

// Layer gives a route the Idempotency-Key semantics of the IETF draft
// (draft-ietf-httpapi-idempotency-key-header): the first request with a
// key is forwarded under a claim, and its answer kept; a retry after it
// gets that answer again, byte for byte, without reaching the upstream;
// a retry while it runs gets 409; the key with another payload, 422. See
// Begin for every decision, and Claim for how a forwarded request ends.
//
// A Layer is made by New and safe for concurrent use. Close it when it
// is replaced (a reload): its claims live on until their requests end.
type Layer struct {
	name     string
	header   string
	methods  []string
	required bool
	scope    []Scope
	terms    Terms
	maxResp  int64
	maxReq   int64
	release  *StatusSet
	store    Store
	onError  StoreAction
	log      *slog.Logger
	renewer  renewer
	counts   *counters
	closing  atomic.Bool
	live     atomic.Int64 // claims not yet ended, and unclaims under way
	unclaims atomic.Int64 // unclaims under way
	closeMu  sync.Mutex
	closed   chan struct{} // closed once closing and no claim is live
	closeSet bool
}

// New returns a Layer configured by o, or an error saying which option
// is wrong.
func New(o Options) (*Layer, error) {
	l := &Layer{
		name:     o.Name,
		header:   o.Header,
		methods:  o.Methods,
		required: o.Required,
		scope:    o.Scope,
		terms:    Terms{Lease: o.Lease, TTL: o.TTL, Retake: o.UnknownOutcome == Forward},
		maxResp:  o.MaxResponse,
		maxReq:   o.MaxRequest,
		release:  o.Release,
		store:    o.Store,
		onError:  o.OnStoreError,
		log:      o.Log,
		counts:   new(counters),
		closed:   make(chan struct{}),
	}
	if l.header == "" {
		l.header = DefaultHeader
	}
	if !validFieldName(l.header) {
		return nil, fmt.Errorf("idempotency: header %q is not a field name", l.header)
	}
	if l.methods == nil {
		l.methods = DefaultMethods
	}
	for _, m := range l.methods {
		if !validFieldName(m) || strings.ToUpper(m) != m {
			return nil, fmt.Errorf("idempotency: method %q is not an upper-case token", m)
		}
	}
	if l.scope == nil {
		l.scope = DefaultScope
	}
	for _, s := range l.scope {
		if s.kind == 0 || (s.kind == scopeHeader && !validFieldName(s.name)) {
			return nil, fmt.Errorf("idempotency: scope %v is not valid", s)
		}
	}
	if l.terms.TTL == 0 {
		l.terms.TTL = DefaultTTL
	}
	if l.terms.Lease == 0 {
		l.terms.Lease = DefaultLease
	}
	switch {
	case l.terms.Lease < 0 || l.terms.TTL < 0:
		return nil, errors.New("idempotency: a negative lease or ttl")
	case l.terms.TTL < l.terms.Lease:
		return nil, fmt.Errorf("idempotency: ttl %v is shorter than the lease %v: an answer must outlive the claim", l.terms.TTL, l.terms.Lease)
	}
	switch {
	case l.maxResp == 0:
		l.maxResp = DefaultMaxResponse
	case l.maxResp < 0:
		l.maxResp = 0
	}
	switch {
	case l.maxReq == 0:
		l.maxReq = DefaultMaxRequest
	case l.maxReq < 0:
		return nil, errors.New("idempotency: a negative max_request")
	}
	if l.release == nil {
		l.release = DefaultRelease()
	}
	if l.store == nil {
		l.store = NewLocal(0, 0)
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.renewer.l = l
	return l, nil
}

// Name returns the layer's name (Options.Name).
func (l *Layer) Name() string { return l.name }

// Header returns the name of the key's field.
func (l *Layer) Header() string { return l.header }

// Store returns the layer's store.
func (l *Layer) Store() Store { return l.store }

// Handles reports whether the layer handles requests of method: whether
// Begin may do anything but pass them.
func (l *Layer) Handles(method string) bool {
	for _, m := range l.methods {
		if m == method {
			return true
		}
	}
	return false
}

// Request is what Begin needs of a request.
type Request struct {
	// Method is the request's method.
	Method string
	// Target is the request's target as the client sent it (HTTP/2's
	// :path): it is part of the payload's fingerprint.
	Target []byte
	// Header holds the request's fields: the key's, those of
	// header:NAME scopes, and Host (":authority" for HTTP/2), which is
	// part of the fingerprint. Begin reads it during the call only.
	Header *h1.Header
	// ClientIP is the client's address (after a trusted proxy's
	// X-Forwarded-For, as the rest of sluice takes it), for ScopeClientIP.
	ClientIP netip.Addr
	// Body is the digest of the whole request body; nil for a request
	// without one. The engine reads the body whole before Begin,
	// writing it to a BodyDigest as it goes.
	Body *BodyDigest
	// body is, when not nil, the whole body, digested in one step instead
	// of Body (the phase's: it holds the body in memory, and so needs no
	// hasher kept between pieces).
	body []byte
	// keyAt is, when not 0, the index in Header of the key's field plus
	// one (the phase's, which looked for it already).
	keyAt int
}

// Outcome is what Begin decided, and how the request's access log line
// says so (the note idempotency=...).
type Outcome uint8

const (
	// Pass: not the layer's (a method it does not handle, or no key and
	// none required): forwarded as if the layer were not there.
	Pass Outcome = iota
	// Claimed: forwarded under a new claim (Decision.Claim).
	Claimed
	// Retaken: forwarded under a new claim that replaced an unknown
	// outcome (UnknownOutcome: Forward).
	Retaken
	// Replayed: answered with the kept answer.
	Replayed
	// InFlight: answered 409: the first request with the key runs.
	InFlight
	// NotKept: answered 409: the first request's answer was not kept
	// (larger than MaxResponse).
	NotKept
	// Mismatch: answered 422: the key was used with another payload.
	Mismatch
	// Missing: answered 400: no key, and Required.
	Missing
	// Invalid: answered 400: a key that is not valid, or two.
	Invalid
	// Unknown: answered 502: the first request may have been processed
	// and got no answer.
	Unknown
	// StoreDenied: answered 503: the store failed, OnStoreError Deny.
	StoreDenied
	// Bypassed: forwarded without the layer: the store failed,
	// OnStoreError Allow.
	Bypassed
)

var outcomeNames = [...]string{"pass", "claimed", "retaken", "replayed", "in_flight", "not_kept",
	"mismatch", "missing", "invalid", "unknown", "store_error", "bypassed"}

// String names the outcome as the access log notes it.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "invalid"
}

// Decision is what Begin decided for a request.
type Decision struct {
	Outcome Outcome
	// Claim is, for Claimed and Retaken, the request's claim: forward
	// the request, then end the claim once (see Claim).
	Claim *Claim
	// Answer is, for Replayed, InFlight, NotKept, Mismatch, Missing,
	// Invalid, Unknown and StoreDenied, the answer to give instead of
	// forwarding the request.
	Answer *Answer
	// Err is, for StoreDenied and Bypassed, the store's error; for
	// Invalid, the *KeyError.
	Err error
}

// Forward reports whether the request is to be forwarded (Pass, Claimed,
// Retaken, Bypassed); if not, Answer is the answer.
func (d Decision) Forward() bool { return d.Answer == nil }

// Begin decides what becomes of a request (see Outcome):
//
//   - a method the layer does not handle, or no key when none is
//     required: Pass;
//   - no key when one is required: 400 (Missing); a key that is not
//     valid (ParseKeyValue) or given twice: 400 (Invalid);
//   - a key no request has used (in its scope): claimed, Claimed;
//   - a key whose record has another payload's fingerprint: 422
//     (Mismatch), whatever the record's state;
//   - a key whose answer was kept: that answer, Replayed;
//   - a key whose request runs, here or at another instance sharing the
//     store: 409 with Retry-After: 1 (InFlight);
//   - a key whose request was answered with an answer too large to keep:
//     409 without Retry-After (NotKept): retrying will not help;
//   - a key whose request may have been processed and got no answer, or
//     whose holder died (its lease ran out): 502 (Unknown), or with
//     UnknownOutcome Forward a new claim, Retaken;
//   - a store that failed or did not answer in time: 503 (StoreDenied),
//     or with OnStoreError Allow, Bypassed.
//
// Every answer the layer makes carries a Proxy-Status field (RFC 9209)
// and an RFC 9457 problem (application/problem+json). ctx bounds the
// store's work besides the store's own timeout.
func (l *Layer) Begin(ctx context.Context, r *Request) Decision { return l.begin(ctx, r, nil) }

// begin is Begin, making a claim in c when it is not nil (see claim).
func (l *Layer) begin(ctx context.Context, r *Request, c *Claim) Decision {
	if !l.Handles(r.Method) {
		return Decision{}
	}
	cs := l.counts
	h := r.Header
	if h == nil {
		h = new(h1.Header)
	}
	raw, err := keyField(h, l.header, r.keyAt-1)
	switch {
	case err == errKeyNotFound && !l.required:
		return Decision{}
	case err == errKeyNotFound:
		cs.invalid.Add(1)
		return Decision{Outcome: Missing, Answer: problemMissing.answer(
			"this request must carry an " + l.header + " field (1 to 255 bytes of printable ASCII)")}
	case err != nil:
		cs.invalid.Add(1)
		ke := err.(*KeyError)
		return Decision{Outcome: Invalid, Err: err, Answer: problemInvalid.answer(
			"the " + l.header + " field " + ke.Reason + "; a key is 1 to 255 bytes of printable ASCII, bare or as a quoted string")}
	}
	key := makeKey(l.scope, l.name, r.ClientIP, h, raw)
	fp := fingerprint(r)
	token := newToken()
	found, err := l.store.Begin(ctx, key, fp, token, l.terms)
	if err != nil {
		if !errors.Is(err, ErrFull) {
			l.unclaim(key, fp, token)
		}
		return l.storeFailed(err)
	}
	switch {
	case found.Claimed:
		cl := l.claim(key, fp, token, c)
		cs.claimed.Add(1)
		if found.Prior != StateNone {
			cs.retaken.Add(1)
			return Decision{Outcome: Retaken, Claim: cl}
		}
		return Decision{Outcome: Claimed, Claim: cl}
	case found.Mismatch:
		cs.mismatches.Add(1)
		return Decision{Outcome: Mismatch, Answer: problemMismatch.answer(
			"the " + l.header + " was used with a request of another method, target or body; use a new key for a new request")}
	}
	switch found.State {
	case StateKept:
		a, err := DecodeAnswer(found.Answer)
		if err != nil {
			return l.storeFailed(err)
		}
		cs.replayed.Add(1)
		return Decision{Outcome: Replayed, Answer: replay(a)}
	case StateInFlight:
		cs.conflicts.Add(1)
		return Decision{Outcome: InFlight, Answer: problemInFlight.answer(
			"the first request with this " + l.header + " is still being processed; retry later for its answer")}
	case StateNotKept:
		cs.conflicts.Add(1)
		return Decision{Outcome: NotKept, Answer: problemNotKept.answer(
			"the request with this " + l.header + " was processed, and its answer was too large to keep; it cannot be given again")}
	case StateUnknown, StateAbandoned:
		cs.unknownRefused.Add(1)
		why := "its try may have reached the upstream and got no answer"
		if found.State == StateAbandoned {
			why = "the proxy forwarding it stopped before it ended"
		}
		return Decision{Outcome: Unknown, Answer: problemUnknown.answer(
			"the request with this " + l.header + " may have been processed: " + why + "; its outcome is unknown, and it is not sent again")}
	}
	return l.storeFailed(fmt.Errorf("idempotency: the store found a record in state %v", found.State))
}

// storeFailed counts and logs a store failure in Begin, and decides as
// OnStoreError says.
func (l *Layer) storeFailed(err error) Decision {
	l.counts.storeErrors.Add(1)
	l.logStoreError("begin", err)
	if l.onError == Allow {
		l.counts.bypassed.Add(1)
		return Decision{Outcome: Bypassed, Err: err}
	}
	return Decision{Outcome: StoreDenied, Err: err, Answer: problemStore.answer(
		"the store of idempotency keys did not answer; the request was not forwarded")}
}

// maxUnclaims bounds the unclaims of a Layer under way at once.
const maxUnclaims = 64

// unclaim undoes, apart from the request, the claim a failed Begin may
// have made all the same: a reply lost or late, while the store did what
// it was asked (Redis ran the script; its answer missed the timeout). The
// request is then not forwarded (deny), or goes without the layer
// (allow), so a claim left standing would stand for a request never sent:
// a 409 to its retries until the lease ran out, then an abandoned key,
// refused as an unknown outcome for the ttl. The store removes the record
// only while this token holds it, so nothing else is touched; a store
// that claimed nothing answers ErrLost. At most maxUnclaims run at once:
// past that, with a store this slow, the lease's end is the bound.
func (l *Layer) unclaim(key Key, fp Fingerprint, token Token) {
	if l.unclaims.Add(1) > maxUnclaims {
		l.unclaims.Add(-1)
		return
	}
	l.live.Add(1) // Close waits for it, as for a claim
	go func() {
		defer l.ended()
		defer l.unclaims.Add(-1)
		_, err := l.store.End(context.Background(), key, fp, token, StateNone, nil, l.terms)
		if err != nil && !errors.Is(err, ErrLost) {
			l.logStoreError("unclaim", err)
		}
	}()
}

// storeLogEvery is the least time between two log lines of a Layer about
// its store failing.
const storeLogEvery = 10 * time.Second

// logStoreError logs a store failure, unless one was logged less than
// storeLogEvery ago: then it is counted, and the next line says how many
// were left out.
func (l *Layer) logStoreError(op string, err error) {
	c := l.counts
	now := time.Now()
	c.mu.Lock()
	if now.Before(c.nextLog) {
		c.suppressed++
		c.mu.Unlock()
		return
	}
	c.nextLog = now.Add(storeLogEvery)
	suppressed := c.suppressed
	c.suppressed = 0
	c.mu.Unlock()
	l.log.Error("idempotency store failed", "layer", l.name, "op", op, "error", err.Error(), "suppressed", suppressed)
}

// Carry makes l go on from old, the Layer it replaces (a config reload):
// l's counts continue old's, and when both keep their records in a Local
// store, l takes old's (with l's bounds), so that a reload forgets no
// claim and no answer. Call it before l is in use.
func (l *Layer) Carry(old *Layer) {
	if old == nil {
		return
	}
	l.counts = old.counts
	if ol, ok := old.store.(*Local); ok {
		if nl, ok := l.store.(*Local); ok {
			ol.SetMaxBytes(nl.maxBytes.Load())
			ol.perShard.Store(nl.perShard.Load())
			l.store = ol
		}
	}
}

// Close marks the layer replaced and returns a channel closed once its
// last claim has ended: requests it claimed keys for still renew, keep
// and release them. Call it once the layer takes no new request; Begin
// must not be called after. The store is the caller's to close (a
// Redis client) once the channel is closed.
func (l *Layer) Close() <-chan struct{} {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	l.closing.Store(true)
	if l.live.Load() == 0 && !l.closeSet {
		l.closeSet = true
		l.renewer.stop()
		close(l.closed)
	}
	return l.closed
}

// ended notes that a claim ended, closing l.closed if it was the last of
// a closed layer.
func (l *Layer) ended() {
	if l.live.Add(-1) == 0 && l.closing.Load() {
		l.closeMu.Lock()
		if !l.closeSet && l.live.Load() == 0 {
			l.closeSet = true
			l.renewer.stop()
			close(l.closed)
		}
		l.closeMu.Unlock()
	}
}

// counters are a Layer's counts, carried from one Layer to the one that
// replaces it (Carry).
type counters struct {
	claimed, retaken, replayed, conflicts, mismatches, invalid, unknownRefused atomic.Uint64
	kept, released, notKept, unknown, lost, storeErrors, bypassed              atomic.Uint64

	mu         sync.Mutex
	nextLog    time.Time // before it, store failures are counted, not logged
	suppressed int       // store failures not logged since the last line
}

// Counts are what a Layer did, for metrics.
type Counts struct {
	Claimed        uint64 // keys claimed: requests forwarded under a claim (retaken ones included)
	Retaken        uint64 // of those, claims that replaced an unknown outcome (UnknownOutcome Forward)
	Replayed       uint64 // requests answered with a kept answer
	Conflicts      uint64 // requests answered 409: in flight, or the answer was not kept
	Mismatches     uint64 // requests answered 422
	Invalid        uint64 // requests answered 400: a missing (required) or invalid key
	UnknownRefused uint64 // requests answered 502: the outcome of the key's request is unknown
	Kept           uint64 // claims ended with their answer kept
	Released       uint64 // claims ended by freeing the key (never reached the upstream, or a released status)
	NotKept        uint64 // claims ended with an answer too large to keep
	Unknown        uint64 // claims ended with an unknown outcome
	Lost           uint64 // claims found lost when they ended (the lease ran out and the key was retaken)
	StoreErrors    uint64 // store operations that failed (begin, renew, end)
	Bypassed       uint64 // requests forwarded without the layer after a store failure (OnStoreError Allow)
}

// Each calls f with each count and its name, as the metrics label it
// (sluice_idempotency_total{result}), in a fixed order.
func (c Counts) Each(f func(result string, n uint64)) {
	f("claimed", c.Claimed)
	f("retaken", c.Retaken)
	f("replayed", c.Replayed)
	f("conflict", c.Conflicts)
	f("mismatch", c.Mismatches)
	f("invalid", c.Invalid)
	f("unknown_refused", c.UnknownRefused)
	f("kept", c.Kept)
	f("released", c.Released)
	f("not_kept", c.NotKept)
	f("unknown", c.Unknown)
	f("lost", c.Lost)
	f("store_error", c.StoreErrors)
	f("bypassed", c.Bypassed)
}

// Counts returns what the layer did so far, the Layers it carried on from
// included.
func (l *Layer) Counts() Counts {
	c := l.counts
	return Counts{
		Claimed: c.claimed.Load(), Retaken: c.retaken.Load(), Replayed: c.replayed.Load(),
		Conflicts: c.conflicts.Load(), Mismatches: c.mismatches.Load(), Invalid: c.invalid.Load(),
		UnknownRefused: c.unknownRefused.Load(), Kept: c.kept.Load(), Released: c.released.Load(),
		NotKept: c.notKept.Load(), Unknown: c.unknown.Load(), Lost: c.lost.Load(),
		StoreErrors: c.storeErrors.Load(), Bypassed: c.bypassed.Load(),
	}
}
