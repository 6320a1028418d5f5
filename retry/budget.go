package retry

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluice-proxy/sluice/internal/clock"
)

// Budget caps retries to a share of the requests of an upstream, so that
// retries cannot multiply the load on an upstream that is already failing
// (Envoy's retry budget, Finagle's RetryBudget). Over a sliding window of ten
// seconds it allows
//
//	retries <= Ratio × requests + MinPerSecond × 10
//
// so a quiet upstream can still retry a few requests. A Budget is safe for
// concurrent use; its zero value is not usable, use NewBudget.
type Budget struct {
	ratio, reserve float64
	now            func() time.Time

	mu      sync.Mutex
	buckets [budgetWindow]budgetBucket
	denied  uint64
}

const budgetWindow = 10 // seconds, one bucket each

type budgetBucket struct {
	sec               int64
	requests, retries float64
}

// NewBudget returns a budget allowing retries up to ratio of requests plus
// minPerSecond retries per second. now is the clock (nil = the monotonic
// clock of internal/clock).
func NewBudget(ratio, minPerSecond float64, now func() time.Time) *Budget {
	if now == nil {
		now = clock.Now
	}
	return &Budget{ratio: ratio, reserve: minPerSecond * budgetWindow, now: now}
}

// Request records one request (a first try).
func (b *Budget) Request() { b.RequestAt(b.now()) }

// RequestAt is Request for a caller that read the budget's clock a moment
// ago (a try's start): now stands for it.
func (b *Budget) RequestAt(now time.Time) {
	b.mu.Lock()
	b.bucketAt(now).requests++
	b.mu.Unlock()
}

// Withdraw records a retry and reports true when the budget allows it; when
// it does not, nothing is recorded but the denial.
func (b *Budget) Withdraw() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.bucket()
	sec := cur.sec
	var reqs, retries float64
	for i := range b.buckets {
		if bk := &b.buckets[i]; sec-bk.sec < budgetWindow {
			reqs += bk.requests
			retries += bk.retries
		}
	}
	if retries+1 > b.ratio*reqs+b.reserve {
		b.denied++
		return false
	}
	cur.retries++
	return true
}

// Denied reports how many retries the budget has refused.
func (b *Budget) Denied() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.denied
}

// bucket returns the current second's bucket, clearing a stale one.
func (b *Budget) bucket() *budgetBucket { return b.bucketAt(b.now()) }

// bucketAt returns the bucket of now's second, clearing a stale one.
func (b *Budget) bucketAt(now time.Time) *budgetBucket {
	sec := now.Unix()
	bk := &b.buckets[sec%budgetWindow]
	if bk.sec != sec {
		*bk = budgetBucket{sec: sec}
	}
	return bk
}

// Backoff is the wait before trying a server again: full jitter, a random
// duration in [0, min(Max, Base × 2^(n-1))] before the n-th retry to the same
// server. A zero Base means no wait; a zero Max means DefaultBackoffMax.
type Backoff struct {
	Base, Max time.Duration
}

// DefaultBackoffMax is the largest backoff ceiling when Backoff.Max is 0.
const DefaultBackoffMax = time.Second

// Delay returns the wait before the n-th retry (n >= 1) to the same server.
// rnd returns a random int64 in [0, n); nil uses math/rand/v2.
func (b Backoff) Delay(n int, rnd func(int64) int64) time.Duration {
	if b.Base <= 0 || n < 1 {
		return 0
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	ceiling := b.Base
	for i := 1; i < n && ceiling < b.Max; i++ {
		ceiling *= 2
	}
	if ceiling > b.Max {
		ceiling = b.Max
	}
	if rnd == nil {
		rnd = rand.Int64N
	}
	return time.Duration(rnd(int64(ceiling) + 1))
}
