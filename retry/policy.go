// Package retry decides whether a failed try of a request may be followed by
// another. Decide is the one place that decision is made, from typed facts
// about the wire; the policy's knobs carry nginx's names.
package retry

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Condition is a set of failures that may be retried, named as nginx's
// proxy_next_upstream names them.
type Condition uint16

const (
	OnError         Condition = 1 << iota // connect failure; connection closed or reset before the response head
	OnTimeout                             // connect, write or response-header timeout
	OnInvalidHeader                       // a malformed or oversized response head
	OnHTTP500
	OnHTTP502
	OnHTTP503
	OnHTTP504
	OnHTTP403
	OnHTTP404
	OnHTTP429
)

var conditionNames = []struct {
	name string
	c    Condition
}{
	{"error", OnError}, {"timeout", OnTimeout}, {"invalid_header", OnInvalidHeader},
	{"http_500", OnHTTP500}, {"http_502", OnHTTP502}, {"http_503", OnHTTP503},
	{"http_504", OnHTTP504}, {"http_403", OnHTTP403}, {"http_404", OnHTTP404},
	{"http_429", OnHTTP429},
}

// ParseCondition returns the condition for an nginx name such as "http_503".
func ParseCondition(name string) (Condition, error) {
	for _, n := range conditionNames {
		if n.name == name {
			return n.c, nil
		}
	}
	return 0, fmt.Errorf("unknown retry condition %q", name)
}

// ParseConditions returns the union of the named conditions.
func ParseConditions(names []string) (Condition, error) {
	var c Condition
	for _, name := range names {
		n, err := ParseCondition(name)
		if err != nil {
			return 0, err
		}
		c |= n
	}
	return c, nil
}

func (c Condition) String() string {
	var names []string
	for _, n := range conditionNames {
		if c&n.c != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "off"
	}
	return strings.Join(names, " ")
}

// Status returns the condition that covers an upstream status, or 0.
func Status(code int) Condition {
	switch code {
	case 500:
		return OnHTTP500
	case 502:
		return OnHTTP502
	case 503:
		return OnHTTP503
	case 504:
		return OnHTTP504
	case 403:
		return OnHTTP403
	case 404:
		return OnHTTP404
	case 429:
		return OnHTTP429
	}
	return 0
}

// NonIdempotent says what may happen to a non-idempotent request (POST,
// PATCH, unknown methods...) after it may have reached the upstream.
type NonIdempotent uint8

const (
	// Keyed retries it only when it carries the idempotency header, which
	// the upstream is trusted to honour (the default).
	Keyed NonIdempotent = iota
	// Never retries it.
	Never
	// Always retries it, as nginx's non_idempotent does: duplicates become
	// possible.
	Always
)

func (n NonIdempotent) String() string {
	switch n {
	case Never:
		return "never"
	case Always:
		return "always"
	}
	return "keyed"
}

// ParseNonIdempotent parses "never", "keyed" or "always".
func ParseNonIdempotent(s string) (NonIdempotent, error) {
	switch s {
	case "keyed":
		return Keyed, nil
	case "never":
		return Never, nil
	case "always":
		return Always, nil
	}
	return 0, fmt.Errorf("non_idempotent must be never, keyed or always, not %q", s)
}

// Policy is the retry policy of one upstream. The zero value is the default
// policy, the one the config file gives an upstream that sets nothing: every
// default is a constant of this package, and config takes its defaults from
// them. A Policy is read-only once in use and may be shared; it must not be
// copied after first use (it holds its default retry budget).
//
// A nil *Policy stands for a zero Policy shared by every user of nil, one
// retry budget for them all.
type Policy struct {
	// Tries is the number of attempts, the first included; 0 means
	// DefaultTries. One try means no retries.
	Tries int
	// On lists the failures that may be retried; 0 means DefaultOn. Use
	// Tries: 1 to turn retries off.
	On Condition
	// NonIdempotent governs non-idempotent requests that may have reached
	// the upstream; the zero value is Keyed.
	NonIdempotent NonIdempotent
	// IdempotencyHeader names the request header that makes a
	// non-idempotent request retryable under Keyed; "" means
	// DefaultHeader.
	IdempotencyHeader string
	// Timeout bounds the time from the first try's start after which no
	// further try starts; 0 means DefaultTimeout, a negative value no
	// bound. A try that starts in time runs under its own timeouts, so
	// a request takes at most Timeout plus one try.
	Timeout time.Duration
	// Backoff is the wait before a try on a server that already failed this
	// request. There is no wait before a try on another server.
	Backoff Backoff
	// Budget caps the share of retries in all traffic of the upstream; it
	// is shared by the requests of that upstream. nil means a budget of
	// DefaultBudgetRatio and DefaultBudgetPerSecond, made on first use and
	// owned by this Policy.
	Budget *Budget
	// BodyBuffer is how many request body bytes are kept for a resend: a
	// body larger than this cannot be replayed once any of it went out.
	// 0 means DefaultBodyBuffer; a negative value keeps nothing.
	BodyBuffer int64

	defaultBudget atomic.Pointer[Budget] // Budget's stand-in when it is nil
}

// Defaults of a zero Policy.
const (
	DefaultTries      = 3
	DefaultOn         = OnError | OnTimeout
	DefaultHeader     = "Idempotency-Key"
	DefaultBodyBuffer = 64 << 10
	// DefaultTimeout is as long as the default response-header timeout
	// (proxy.DefaultResponseHeaderTimeout): a try that timed out waiting
	// for its answer is then the answer, so that a request slower than
	// that runs once, not once per try.
	DefaultTimeout = 60 * time.Second
	// DefaultBudgetRatio and DefaultBudgetPerSecond are the default retry
	// budget: retries within 20% of requests, plus 10 per second.
	DefaultBudgetRatio     = 0.2
	DefaultBudgetPerSecond = 10
)

// nilPolicy is what a nil *Policy stands for.
var nilPolicy Policy

func (p *Policy) orDefault() *Policy {
	if p == nil {
		return &nilPolicy
	}
	return p
}

// MaxTries returns the effective number of tries.
func (p *Policy) MaxTries() int {
	if p == nil || p.Tries <= 0 {
		return DefaultTries
	}
	return p.Tries
}

// Conditions returns the effective retry conditions.
func (p *Policy) Conditions() Condition {
	if p == nil || p.On == 0 {
		return DefaultOn
	}
	return p.On
}

// Header returns the effective idempotency header name.
func (p *Policy) Header() string {
	if p == nil || p.IdempotencyHeader == "" {
		return DefaultHeader
	}
	return p.IdempotencyHeader
}

// BufferSize returns how many body bytes to keep for replay.
func (p *Policy) BufferSize() int64 {
	switch {
	case p == nil || p.BodyBuffer == 0:
		return DefaultBodyBuffer
	case p.BodyBuffer < 0:
		return 0
	}
	return p.BodyBuffer
}

// RetryTimeout returns the effective Timeout; 0 means no bound.
func (p *Policy) RetryTimeout() time.Duration {
	switch {
	case p == nil || p.Timeout == 0:
		return DefaultTimeout
	case p.Timeout < 0:
		return 0
	}
	return p.Timeout
}

// Mode returns the effective NonIdempotent mode.
func (p *Policy) Mode() NonIdempotent {
	if p == nil {
		return Keyed
	}
	return p.NonIdempotent
}

// budget returns the effective retry budget.
func (p *Policy) budget() *Budget {
	p = p.orDefault()
	if p.Budget != nil {
		return p.Budget
	}
	if b := p.defaultBudget.Load(); b != nil {
		return b
	}
	p.defaultBudget.CompareAndSwap(nil, NewBudget(DefaultBudgetRatio, DefaultBudgetPerSecond, nil))
	return p.defaultBudget.Load()
}

// Begin records a new request (its first try), made at now, in the retry
// budget, which allows retries in proportion to requests. now is read
// from the budget's clock (internal/clock's, unless the Budget was made
// with another).
func (p *Policy) Begin(now time.Time) { p.budget().RequestAt(now) }

// Denied reports how many retries the policy's budget has refused.
func (p *Policy) Denied() uint64 { return p.budget().Denied() }

// Resendable reports whether a request may be sent again after it may have
// been processed: it is idempotent, or the policy allows it (Always, or
// Keyed and the request carries the idempotency header).
func (p *Policy) Resendable(method string, keyed bool) bool {
	if Idempotent(method) {
		return true
	}
	switch p.Mode() {
	case Always:
		return true
	case Keyed:
		return keyed
	}
	return false
}

// Reuse says which connections a try may be sent on.
type Reuse uint8

const (
	// ReuseAny: a pooled connection the pool finds alive, or a new one.
	ReuseAny Reuse = iota
	// ReuseOnce: the request must be sent at most once, so it takes only
	// a pooled connection the pool vouches for (pool.Limits.Once), or a
	// new one. A connection that dies under it cannot be retried.
	ReuseOnce
	// ReuseNone: a new connection.
	ReuseNone
)

// Reuse decides which connections the next try of a request may use.
// once is set for a request that must reach the upstream at most once
// whatever its method and key (Facts.Once). afterStale is set when the
// previous try failed on a stale pooled connection (Stale): the pool may
// hold more connections to the same dead process, and they must not use up
// the request's tries, so the retry dials.
func (p *Policy) Reuse(method string, keyed, once, afterStale bool) Reuse {
	switch {
	case afterStale:
		return ReuseNone
	case once || !p.Resendable(method, keyed):
		return ReuseOnce
	}
	return ReuseAny
}

// Idempotent reports whether a method is idempotent per RFC 9110 §9.2.2.
// Every other method, unknown ones included, is treated as non-idempotent
// (nginx retries unknown methods; sluice does not).
func Idempotent(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}
