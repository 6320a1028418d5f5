// Package ratelimit limits the rate of requests a route takes, per key
// (the client's address, a header's value, or the whole route), with the
// generic cell rate algorithm (GCRA): one timestamp per key, the
// theoretical arrival time of its next request, kept in a Store, in
// sluice's memory (Local) or in Redis, where every instance of a fleet
// spends from one budget (Redis).
//
// A Limiter is the route phase: a proxy.RequestFilter that answers a
// request over the limit with 429, Retry-After, an RFC 9209 Proxy-Status
// and the RateLimit-Policy and RateLimit fields of the IETF httpapi draft.
package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is a number of requests per period: the steady rate a key may keep
// up. A burst on top of it is the Policy's.
type Rate struct {
	Count  int64         // requests, >= 1
	Period time.Duration // per this long: time.Second, time.Minute or time.Hour
}

// MaxBurst bounds Policy.Burst, so that the GCRA's arithmetic (burst times
// the interval between requests, in nanoseconds) cannot overflow.
const MaxBurst = 1_000_000

// MaxCount bounds Rate.Count: a request every microsecond at most, the
// resolution of the Redis store's clock.
const MaxCount = 1_000_000

// ErrRate is the error of ParseRate for text that is not a rate.
var ErrRate = errors.New(`a rate is a whole number of requests per s, m or h, such as "100/s" or "6000/m"`)

// ParseRate reads a rate written as a count, "/" and a unit: s (per
// second), m (per minute) or h (per hour): "100/s", "6000/m", "10/h".
// The count is a whole number from 1 to MaxCount per second (so at most
// 60 times that per minute, 3600 times per hour).
func ParseRate(s string) (Rate, error) {
	num, unit, ok := strings.Cut(s, "/")
	if !ok || num == "" || len(num) > 10 {
		return Rate{}, ErrRate
	}
	for i := 0; i < len(num); i++ {
		if num[i] < '0' || num[i] > '9' {
			return Rate{}, ErrRate
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return Rate{}, ErrRate
	}
	var per time.Duration
	switch unit {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		return Rate{}, ErrRate
	}
	if n < 1 {
		return Rate{}, fmt.Errorf("%q: the count must be at least 1", s)
	}
	if n > MaxCount*int64(per/time.Second) {
		return Rate{}, fmt.Errorf("%q: more than %d requests a second", s, MaxCount)
	}
	return Rate{Count: n, Period: per}, nil
}

// String writes r as ParseRate reads it.
func (r Rate) String() string {
	unit := "s"
	switch r.Period {
	case time.Minute:
		unit = "m"
	case time.Hour:
		unit = "h"
	}
	return strconv.FormatInt(r.Count, 10) + "/" + unit
}

// Interval is the time between two requests at the steady rate: the
// GCRA's emission interval, at least a nanosecond (that too for a Rate
// with no Count, which a Limiter takes as no limit).
func (r Rate) Interval() time.Duration {
	if r.Count <= 0 {
		return time.Nanosecond
	}
	return max(time.Nanosecond, r.Period/time.Duration(r.Count))
}

// Policy is what a key may spend: Rate on average, and up to Burst
// requests at once after a quiet spell.
type Policy struct {
	Rate Rate
	// Burst (>= 1, at most MaxBurst) is how many requests a key with a
	// whole budget may make at once; 1 spaces every request by the
	// rate's interval.
	Burst int64
}

// burst returns p.Burst within its bounds.
func (p Policy) burst() int64 { return min(max(p.Burst, 1), MaxBurst) }

// Decision is a store's answer for one request.
type Decision struct {
	// Allowed says the request spent one unit of the key's budget.
	Allowed bool
	// Remaining is how many more requests the key could make now.
	Remaining int64
	// RetryAfter is, for a request not allowed, how long until one would
	// be; 0 for one allowed.
	RetryAfter time.Duration
	// Reset is how long until the key's budget is whole again (Burst
	// requests), when nothing more is spent.
	Reset time.Duration
}

// gcra decides one request at now for a key whose theoretical arrival
// time is tat (a time in the past, or 0, for a key with its whole budget):
// it returns the key's new theoretical arrival time, unchanged for a
// request not allowed. Times are nanoseconds on any one clock.
//
// The algorithm: each allowed request pushes tat one interval further; a
// request is allowed when tat, pushed, is at most burst intervals ahead
// of now.
func gcra(tat, now int64, interval, burst int64) (int64, Decision) {
	if tat < now {
		tat = now
	}
	next := tat + interval
	allowAt := next - burst*interval
	if now < allowAt {
		return tat, Decision{RetryAfter: time.Duration(allowAt - now), Reset: time.Duration(tat - now)}
	}
	return next, Decision{Allowed: true, Remaining: (now - allowAt) / interval, Reset: time.Duration(next - now)}
}
