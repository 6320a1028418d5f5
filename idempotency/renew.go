package idempotency

import (
	"context"
	"sync"
	"time"
)

// renewer renews the leases of a Layer's live claims: every third of the
// lease it renews all of them, 256 to a store call (for Redis, one
// pipelined round trip for each 256 claims), so a claim survives two
// failed renewals in a row. One timer does it for all of them, armed
// while there is a claim: its function runs in a goroutine of its own
// each time it fires, and none is left between renewals.
//
// The live claims are a list linked through the claims themselves, so
// that adding one and removing it take a few pointer writes under the
// lock and allocate nothing. A timer that fires with no claim left is not
// armed again; a claim made meanwhile arms it anew (Reset, without an
// allocation). A goroutine and a timer per claim, or a goroutine started
// whenever the layer goes from idle to busy, would cost a goroutine start
// and a timer per request (1.6 µs, measured) on a layer whose requests
// come one at a time.
type renewer struct {
	l      *Layer
	mu     sync.Mutex
	first  *Claim // the live claims, linked by Claim.prev and Claim.next
	n      int    // how many
	timer  *time.Timer
	armed  bool // the timer is set to fire, or its function runs
	closed bool // the layer closed and no claim was left: never armed again
}

// every is the time between two renewals.
func (r *renewer) every() time.Duration { return max(r.l.terms.Lease/3, time.Millisecond) }

// add has c renewed until remove.
func (r *renewer) add(c *Claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.prev, c.next = nil, r.first
	if r.first != nil {
		r.first.prev = c
	}
	r.first = c
	c.linked = true
	r.n++
	if !r.armed {
		r.armed = true
		if r.timer == nil {
			r.timer = time.AfterFunc(r.every(), r.fire)
		} else {
			r.timer.Reset(r.every())
		}
	}
}

// remove stops renewing c. The timer stays armed: when it fires with no
// claim, it stops.
func (r *renewer) remove(c *Claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !c.linked {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		r.first = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next, c.linked = nil, nil, false
	r.n--
}

// stop disarms the timer of a closed layer once no claim is left, so that
// nothing of the layer runs after its last claim.
func (r *renewer) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 {
		return
	}
	r.closed = true
	if r.armed && r.timer != nil && r.timer.Stop() {
		r.armed = false
	}
}

// fire renews the live claims, and arms the timer again while there are
// any.
func (r *renewer) fire() {
	r.renew()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 && !r.closed {
		r.timer.Reset(r.every())
		return
	}
	r.armed = false
}

// renew renews the live claims once.
func (r *renewer) renew() {
	r.mu.Lock()
	held := make([]Held, 0, r.n)
	for c := r.first; c != nil; c = c.next {
		held = append(held, Held{Key: c.key, Token: c.token})
	}
	r.mu.Unlock()
	l := r.l
	var lost map[Token]bool
	for i := 0; i < len(held); i += renewBatch {
		j := min(i+renewBatch, len(held))
		ok, err := l.store.Renew(context.Background(), held[i:j], l.terms)
		if err != nil {
			l.counts.storeErrors.Add(1)
			l.logStoreError("renew", err)
			continue
		}
		for k, h := range held[i:j] {
			if !ok[k] {
				if lost == nil {
					lost = make(map[Token]bool)
				}
				lost[h.Token] = true
			}
		}
	}
	if lost == nil {
		return
	}
	// The claims found lost are marked among those still live: a claim
	// that ended meanwhile may be another's already (the phase's tees are
	// used again), so none is held on to outside the lock.
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := r.first; c != nil; c = c.next {
		if lost[c.token] {
			c.lost.Store(true)
		}
	}
}

// renewBatch is the most claims renewed in one store call: a Redis
// pipeline of that many scripts takes a few milliseconds, well within a
// store's timeout however many claims are live.
const renewBatch = 256
