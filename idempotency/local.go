package idempotency

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Local store's bounds.
const (
	// DefaultMaxKeys is the number of records a Local store holds when
	// its maxKeys is 0.
	DefaultMaxKeys = 100_000
	// DefaultMaxBytes is the total size of the answers a Local store
	// keeps when its maxBytes is 0.
	DefaultMaxBytes = 64 << 20
)

// localShards is the number of independently locked parts of a Local
// store.
const localShards = 64

// Local is a Store in this process's memory: a map from key to record,
// split into 64 shards, each with its own lock. Its size is bounded:
//
//   - at most maxKeys records (rounded up to a multiple of 64), each about
//     200 bytes besides its answer. A new key in a full shard first has
//     the shard's expired records removed; if none has expired, Begin
//     fails with ErrFull (a store error: the request follows
//     on_store_error). A record is never dropped before its time, since a
//     dropped record would let its key's retry through a second time.
//   - at most maxBytes bytes of kept answers in all. An answer that does
//     not fit is not kept: its key is kept as StateNotKept, whose retries
//     are answered 409, as for an answer larger than max_response.
//
// Records expire lazily: each shard keeps its records in a queue by the
// time they expire and removes the expired ones at its head whenever it
// is used, so no goroutine is needed and a Local store needs no Close.
type Local struct {
	perShard atomic.Int64
	maxBytes atomic.Int64
	bytes    atomic.Int64 // of the answers kept
	shards   [localShards]localShard
}

type localShard struct {
	mu    sync.Mutex
	m     map[Key]*localRecord
	queue []expiry // by when records expire, oldest first (nearly: see sweep)
	head  int      // queue[:head] are done
	_     [32]byte // keeps neighbouring shards' locks off one cache line
}

// expiry is when key's record expires, as it was when queued.
type expiry struct {
	key Key
	at  time.Time
}

type localRecord struct {
	state   State // StateInFlight (which reads as StateAbandoned after lease), or an ended state
	token   Token
	fp      Fingerprint
	lease   time.Time // StateInFlight: the claim ends then unless renewed
	expires time.Time // the record ends then (an in-flight one not before its lease)
	answer  []byte    // StateKept
}

// NewLocal returns an empty Local store of at most maxKeys records and
// maxBytes bytes of answers; 0 means DefaultMaxKeys, DefaultMaxBytes.
func NewLocal(maxKeys int, maxBytes int64) *Local {
	l := new(Local)
	l.SetMaxKeys(maxKeys)
	l.SetMaxBytes(maxBytes)
	for i := range l.shards {
		l.shards[i].m = make(map[Key]*localRecord)
	}
	return l
}

// SetMaxKeys changes the bound on the records held (a reload that keeps
// the store); 0 means DefaultMaxKeys. Records held already stay, beyond
// it too, until they expire.
func (l *Local) SetMaxKeys(n int) {
	if n <= 0 {
		n = DefaultMaxKeys
	}
	l.perShard.Store(int64((n + localShards - 1) / localShards))
}

// SetMaxBytes changes the bound on the bytes of kept answers (a reload
// that keeps the store); 0 means DefaultMaxBytes. Answers kept already
// stay.
func (l *Local) SetMaxBytes(n int64) {
	if n <= 0 {
		n = DefaultMaxBytes
	}
	l.maxBytes.Store(n)
}

func (l *Local) shard(k Key) *localShard {
	return &l.shards[binary.LittleEndian.Uint64(k[:8])%localShards]
}

// state reads r's state at now: an in-flight record whose lease ran out
// is abandoned.
func (r *localRecord) at(now time.Time) State {
	if r.state == StateInFlight && !now.Before(r.lease) {
		return StateAbandoned
	}
	return r.state
}

// Begin implements Store.
func (l *Local) Begin(_ context.Context, key Key, fp Fingerprint, token Token, t Terms) (Found, error) {
	now := time.Now()
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l.sweep(sh, now, false)
	r := sh.m[key]
	if r != nil && !now.Before(r.expires) && r.at(now) != StateInFlight {
		l.remove(sh, key, r)
		r = nil
	}
	prior := StateNone
	if r != nil {
		s := r.at(now)
		switch {
		case r.fp != fp:
			return Found{State: s, Mismatch: true}, nil
		case s == StateKept:
			return Found{State: s, Answer: r.answer}, nil
		case (s == StateUnknown || s == StateAbandoned) && t.Retake:
			prior = s
		default:
			return Found{State: s}, nil
		}
	} else if int64(len(sh.m)) >= l.perShard.Load() {
		l.sweep(sh, now, true)
		if int64(len(sh.m)) >= l.perShard.Load() {
			return Found{}, ErrFull
		}
	}
	if r == nil {
		r = new(localRecord)
		sh.m[key] = r
	}
	l.bytes.Add(-int64(len(r.answer)))
	*r = localRecord{state: StateInFlight, token: token, fp: fp, lease: now.Add(t.Lease),
		expires: now.Add(max(t.TTL, t.Lease))}
	sh.queue = append(sh.queue, expiry{key, r.expires})
	return Found{Claimed: true, Prior: prior}, nil
}

// Renew implements Store.
func (l *Local) Renew(_ context.Context, held []Held, t Terms) ([]bool, error) {
	now := time.Now()
	ok := make([]bool, len(held))
	for i, h := range held {
		sh := l.shard(h.Key)
		sh.mu.Lock()
		if r := sh.m[h.Key]; r != nil && r.state == StateInFlight && r.token == h.Token {
			// Held again even if the lease ran out, as long as no
			// request retook the key: nothing acted on its lapse.
			r.lease = now.Add(t.Lease)
			if r.expires.Before(r.lease) {
				r.expires = r.lease
				sh.queue = append(sh.queue, expiry{h.Key, r.expires})
			}
			ok[i] = true
		}
		sh.mu.Unlock()
	}
	return ok, nil
}

// instant marks a Local store as one whose calls never wait for I/O.
func (l *Local) instant() {}

// End implements Store.
func (l *Local) End(_ context.Context, key Key, fp Fingerprint, token Token, s State, answer []byte, t Terms) (State, error) {
	now := time.Now()
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.m[key]
	if r == nil || r.state != StateInFlight || r.token != token {
		return StateNone, ErrLost
	}
	if s == StateNone {
		l.remove(sh, key, r)
		return StateNone, nil
	}
	if s == StateKept {
		if l.bytes.Add(int64(len(answer))) > l.maxBytes.Load() {
			// Make room from the expired answers of every shard,
			// once; else keep the key without its answer.
			l.sweep(sh, now, false)
			for i := range l.shards {
				// Only the shards free now: waiting for one while
				// holding sh could deadlock with another End.
				if o := &l.shards[i]; o != sh && o.mu.TryLock() {
					l.sweep(o, now, false)
					o.mu.Unlock()
				}
			}
			if l.bytes.Load() > l.maxBytes.Load() {
				l.bytes.Add(-int64(len(answer)))
				s, answer = StateNotKept, nil
			}
		}
	} else {
		answer = nil
	}
	*r = localRecord{state: s, token: token, fp: fp, expires: now.Add(t.TTL), answer: answer}
	sh.queue = append(sh.queue, expiry{key, r.expires})
	return s, nil
}

// remove deletes key's record r from sh.
func (l *Local) remove(sh *localShard, key Key, r *localRecord) {
	l.bytes.Add(-int64(len(r.answer)))
	delete(sh.m, key)
}

// sweep removes the records of sh that expired by now, from the head of
// its queue. The queue is in the order records were queued, which is
// the order they expire in as long as the store's terms stay the same;
// a record queued after one that expires later (a reload that shortened
// the ttl) waits for it, and a full shard looks at all of its records
// (all). An entry whose record was queued again since, or is in flight
// under its lease, is skipped: it has a later entry.
func (l *Local) sweep(sh *localShard, now time.Time, all bool) {
	for sh.head < len(sh.queue) {
		e := sh.queue[sh.head]
		if now.Before(e.at) {
			break
		}
		sh.queue[sh.head] = expiry{}
		sh.head++
		if r := sh.m[e.key]; r != nil && r.expires.Equal(e.at) && r.at(now) != StateInFlight {
			l.remove(sh, e.key, r)
		} else if r != nil && r.expires.Equal(e.at) {
			// In flight past its record's time: look again at the
			// end of its lease.
			r.expires = r.lease
			sh.queue = append(sh.queue, expiry{e.key, r.expires})
		}
	}
	if sh.head > 64 && sh.head*2 > len(sh.queue) {
		n := copy(sh.queue, sh.queue[sh.head:])
		clear(sh.queue[n:])
		sh.queue, sh.head = sh.queue[:n], 0
	}
	if all {
		for k, r := range sh.m {
			if !now.Before(r.expires) && r.at(now) != StateInFlight {
				l.remove(sh, k, r)
			}
		}
	}
}

// Len returns the number of records held, expired ones not yet removed
// included.
func (l *Local) Len() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Bytes returns the bytes of the answers kept.
func (l *Local) Bytes() int64 { return l.bytes.Load() }
