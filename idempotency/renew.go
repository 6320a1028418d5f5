package idempotency

import (
	"context"
	"sync"
	"time"
)

// renewer renews the leases of a Layer's live claims: one goroutine for
// all of them, which runs while there is at least one and exits when the
// last ends. Every third of the lease it renews all of them, 256 to a
// store call (for Redis, one pipelined round trip for each 256 claims),
// so a claim survives two failed renewals in a row.
//
// One goroutine per claim would cost a goroutine start and a timer per
// request and, with Redis, a round trip per claim per renewal; this
// costs two map operations per claim (105 ns, against 1.6 µs for a
// goroutine and its timer, measured), a goroutine start only when the
// layer goes from idle to busy, and a round trip per 256 claims per
// renewal period.
type renewer struct {
	l       *Layer
	mu      sync.Mutex
	claims  map[*Claim]struct{}
	running bool
	wake    chan struct{} // the last claim ended: the goroutine exits
}

// add has c renewed until remove.
func (r *renewer) add(c *Claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claims == nil {
		r.claims = make(map[*Claim]struct{})
		r.wake = make(chan struct{}, 1)
	}
	r.claims[c] = struct{}{}
	if !r.running {
		r.running = true
		go r.run()
	}
}

// remove stops renewing c. When c was the last claim, the goroutine is
// told to exit (it does at once).
func (r *renewer) remove(c *Claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.claims, c)
	if len(r.claims) == 0 && r.running {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// run renews the claims every third of the lease until there are none.
func (r *renewer) run() {
	every := max(r.l.terms.Lease/3, time.Millisecond)
	t := time.NewTimer(every)
	defer t.Stop()
	var batch []*Claim
	var held []Held
	for {
		select {
		case <-r.wake:
		case <-t.C:
			batch, held = r.renew(batch[:0], held[:0])
			t.Reset(every)
		}
		r.mu.Lock()
		if len(r.claims) == 0 {
			r.running = false
			// A wake sent after this point is for a later goroutine;
			// one sent before it is drained here, so that it does not
			// end that goroutine early.
			select {
			case <-r.wake:
			default:
			}
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}

// renew renews the live claims once.
func (r *renewer) renew(batch []*Claim, held []Held) ([]*Claim, []Held) {
	r.mu.Lock()
	for c := range r.claims {
		batch = append(batch, c)
		held = append(held, Held{Key: c.key, Token: c.token})
	}
	r.mu.Unlock()
	if len(batch) == 0 {
		return batch, held
	}
	l := r.l
	for i := 0; i < len(batch); i += renewBatch {
		j := min(i+renewBatch, len(batch))
		ok, err := l.store.Renew(context.Background(), held[i:j], l.terms)
		if err != nil {
			l.counts.storeErrors.Add(1)
			l.logStoreError("renew", err)
			continue
		}
		for k, c := range batch[i:j] {
			if !ok[k] {
				c.lost.Store(true)
			}
		}
	}
	clear(batch) // drop the references until the next round
	return batch, held
}

// renewBatch is the most claims renewed in one store call: a Redis
// pipeline of that many scripts takes a few milliseconds, well within a
// store's timeout however many claims are live.
const renewBatch = 256
