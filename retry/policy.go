// Package retry decides whether a failed try of a request may be followed by
// another. Decide is the one place that decision is made, from typed facts
// about the wire; the policy's knobs carry nginx's names.
package retry

import (
	"fmt"
	"strings"
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
// policy; a Policy is read-only once in use and may be shared.
type Policy struct {
	// Tries is the number of attempts, the first included; 0 means the
	// default, 3. One try means no retries.
	Tries int
	// On lists the failures that may be retried; 0 means the default,
	// error and timeout. Use Tries: 1 to turn retries off.
	On Condition
	// NonIdempotent governs non-idempotent requests that may have reached
	// the upstream; the zero value is Keyed.
	NonIdempotent NonIdempotent
	// IdempotencyHeader names the request header that makes a
	// non-idempotent request retryable under Keyed; "" means
	// "Idempotency-Key".
	IdempotencyHeader string
	// Timeout bounds the time from the first try's start after which no
	// further try starts; 0 means no bound.
	Timeout time.Duration
	// Backoff is the wait before a try on a server that already failed this
	// request. There is no wait before a try on another server.
	Backoff Backoff
	// Budget, when not nil, caps the share of retries in all traffic of
	// the upstream; it is shared by the requests of that upstream.
	Budget *Budget
	// BodyBuffer is how many request body bytes are kept for a resend: a
	// body larger than this cannot be replayed once any of it went out.
	// 0 means the default, 64 KiB; a negative value keeps nothing.
	BodyBuffer int64
}

// Defaults of a zero Policy.
const (
	DefaultTries      = 3
	DefaultOn         = OnError | OnTimeout
	DefaultHeader     = "Idempotency-Key"
	DefaultBodyBuffer = 64 << 10
)

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

// Mode returns the effective NonIdempotent mode.
func (p *Policy) Mode() NonIdempotent {
	if p == nil {
		return Keyed
	}
	return p.NonIdempotent
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
