package idempotency

import (
	"context"
	"hash/maphash"
	"math"
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
// store: a key's shard is the top localShardBits bits of its hash.
const (
	localShardBits = 6
	localShards    = 1 << localShardBits
)

// Local is a Store in this process's memory: a table from key to record
// (recordTable), split into 64 shards, each with its own lock. Its size
// is bounded:
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
//
// The records, the queue and the answers hold no pointer for the garbage
// collector to follow: a store of a day's keys is a few large blocks to
// it, not a few objects per key to mark at every cycle (which cost more
// than the rest of the store together, measured with 300,000 keys).
// Times are nanoseconds since the store was made (monotonic), and the
// answers are copied into chunks of memory that each shard appends to
// (see answerChunk): besides the answers it counts against maxBytes, a
// shard holds the room left in its current chunk (at most 64 KiB) and
// that of the chunks not yet empty.
type Local struct {
	perShard atomic.Int64
	maxBytes atomic.Int64
	bytes    atomic.Int64 // of the answers kept
	epoch    time.Time    // times are nanoseconds since it
	seed     maphash.Seed // of hash
	shards   [localShards]localShard
}

type localShard struct {
	mu     sync.Mutex
	t      recordTable
	queue  []expiry // by when records expire, oldest first (nearly: see sweep)
	head   int      // queue[:head] are done
	due    int64    // queue[head].at; math.MaxInt64 when the queue is done
	chunks []answerChunk
	chunk0 uint64   // the id of chunks[0]: ids count the shard's chunks
	cur    uint64   // the id of the chunk answers are appended to; noChunk before the first
	_      [32]byte // keeps neighbouring shards' locks off one cache line
}

// expiry is when the record at index rec of the shard's table expires,
// as it was when queued. The index, not the key, names the record: an
// entry is 16 bytes, and the sweep reaches its record without a lookup.
// The record there may have been removed since (its state is then
// StateNone), or even be another key's, which a record's index is given
// to once it is free: an entry only ever removes a record whose time it
// is (its expires is the entry's at, which is past), and so is right
// whichever record that is.
type expiry struct {
	at  int64
	rec uint32
}

type localRecord struct {
	key     Key
	token   Token
	fp      Fingerprint
	lease   int64 // StateInFlight: the claim ends then unless renewed
	expires int64 // the record ends then (an in-flight one not before its lease)
	// StateKept: the answer is chunk's bytes [off, off+n).
	chunk  uint64
	off, n int
	state  State  // StateInFlight (which reads as StateAbandoned after lease), or an ended state; StateNone when free
	idx    uint32 // its index in the shard's table
}

// answerChunk holds answers of a shard, one after the other: the shard
// appends each answer it keeps to its current chunk, whose bytes are
// never written again once handed out (Found.Answer aliases them), and
// frees a chunk once none of its answers is kept any more. Answers expire
// in about the order they were kept, so chunks empty in about the order
// they filled; a chunk keeps its memory while one of its answers lives.
type answerChunk struct {
	data []byte // nil once freed
	live int    // answers in it still kept
}

// noChunk is a shard's current chunk before it has one.
const noChunk = ^uint64(0)

// Bounds of the chunks' sizes: a shard's chunk is an eighth of the bytes
// the shard keeps, within them, so that a store of few answers holds
// little more than them, and a large one allocates seldom. An answer of
// more than half the largest chunk gets a chunk of its own.
const (
	minChunk = 4 << 10
	maxChunk = 64 << 10
)

// NewLocal returns an empty Local store of at most maxKeys records and
// maxBytes bytes of answers; 0 means DefaultMaxKeys, DefaultMaxBytes.
func NewLocal(maxKeys int, maxBytes int64) *Local {
	l := &Local{epoch: time.Now(), seed: maphash.MakeSeed()}
	l.SetMaxKeys(maxKeys)
	l.SetMaxBytes(maxBytes)
	for i := range l.shards {
		l.shards[i].cur = noChunk
		l.shards[i].due = math.MaxInt64
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

// hash returns k's hash under the store's seed: its top bits choose the
// shard, its low 32 bits are k's tag in the shard's table. Keys are
// digests of what clients send, and could be chosen to fall into one
// shard, or crowd one place of its table, if they chose it: the seed is
// secret, and random for each store.
func (l *Local) hash(k *Key) uint64 { return maphash.Comparable(l.seed, *k) }

// shard returns the shard of the key whose hash is h.
func (l *Local) shard(h uint64) *localShard { return &l.shards[h>>(64-localShardBits)] }

// now returns the store's time: nanoseconds since it was made, on the
// monotonic clock.
func (l *Local) now() int64 { return int64(time.Since(l.epoch)) }

// at reads r's state at now: an in-flight record whose lease ran out is
// abandoned.
func (r *localRecord) at(now int64) State {
	if r.state == StateInFlight && now >= r.lease {
		return StateAbandoned
	}
	return r.state
}

// Begin implements Store.
func (l *Local) Begin(_ context.Context, key Key, fp Fingerprint, token Token, t Terms) (Found, error) {
	now := l.now()
	h := l.hash(&key)
	sh := l.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l.sweep(sh, now, false)
	r := sh.t.get(&key, uint32(h))
	if r != nil && now >= r.expires && r.at(now) != StateInFlight {
		l.remove(sh, r)
		r = nil
	}
	prior := StateNone
	if r != nil {
		s := r.at(now)
		switch {
		case r.fp != fp:
			return Found{State: s, Mismatch: true}, nil
		case s == StateKept:
			return Found{State: s, Answer: sh.answer(r)}, nil
		case (s == StateUnknown || s == StateAbandoned) && t.Retake:
			prior = s
			l.drop(sh, r)
		default:
			return Found{State: s}, nil
		}
	} else {
		if int64(sh.t.n) >= l.perShard.Load() {
			l.sweep(sh, now, true)
			if int64(sh.t.n) >= l.perShard.Load() {
				return Found{}, ErrFull
			}
		}
		r = sh.t.add(&key, uint32(h))
	}
	*r = localRecord{key: key, idx: r.idx, state: StateInFlight, token: token, fp: fp, lease: now + int64(t.Lease),
		expires: now + int64(max(t.TTL, t.Lease))}
	sh.enqueue(r)
	return Found{Claimed: true, Prior: prior}, nil
}

// Renew implements Store.
func (l *Local) Renew(_ context.Context, held []Held, t Terms) ([]bool, error) {
	now := l.now()
	ok := make([]bool, len(held))
	for i, h := range held {
		hash := l.hash(&h.Key)
		sh := l.shard(hash)
		sh.mu.Lock()
		if r := sh.t.get(&h.Key, uint32(hash)); r != nil && r.state == StateInFlight && r.token == h.Token {
			// Held again even if the lease ran out, as long as no
			// request retook the key: nothing acted on its lapse.
			r.lease = now + int64(t.Lease)
			if r.expires < r.lease {
				r.expires = r.lease
				sh.enqueue(r)
			}
			ok[i] = true
		}
		sh.mu.Unlock()
	}
	return ok, nil
}

// instant marks a Local store as one whose calls never wait for I/O.
func (l *Local) instant() {}

// End implements Store. A kept answer is copied: answer is the caller's
// again when End returns.
func (l *Local) End(_ context.Context, key Key, fp Fingerprint, token Token, s State, answer []byte, t Terms) (State, error) {
	now := l.now()
	h := l.hash(&key)
	sh := l.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.t.get(&key, uint32(h))
	if r == nil || r.state != StateInFlight || r.token != token {
		return StateNone, ErrLost
	}
	if s == StateNone {
		l.remove(sh, r)
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
	}
	claimed := r.expires
	*r = localRecord{key: key, idx: r.idx, state: s, token: token, fp: fp, expires: now + int64(t.TTL)}
	if s == StateKept {
		r.chunk, r.off, r.n = sh.put(answer)
	}
	sh.requeue(r, claimed)
	return s, nil
}

// remove deletes the record r from sh.
func (l *Local) remove(sh *localShard, r *localRecord) {
	l.drop(sh, r)
	sh.t.remove(&r.key, uint32(l.hash(&r.key)))
}

// drop frees r's answer, if it has one.
func (l *Local) drop(sh *localShard, r *localRecord) {
	if r.state != StateKept {
		return
	}
	l.bytes.Add(-int64(r.n))
	sh.release(r.chunk)
	r.state = StateNone
}

// put appends answer to the shard's chunks and returns where it is.
func (sh *localShard) put(answer []byte) (id uint64, off, n int) {
	n = len(answer)
	if n > maxChunk/2 {
		// A chunk of its own, beside the current one.
		sh.chunks = append(sh.chunks, answerChunk{data: append(make([]byte, 0, n), answer...), live: 1})
		return sh.chunk0 + uint64(len(sh.chunks)-1), 0, n
	}
	var c *answerChunk
	if sh.cur != noChunk {
		c = &sh.chunks[sh.cur-sh.chunk0]
	}
	if c == nil || cap(c.data)-len(c.data) < n {
		size := 0
		for i := range sh.chunks {
			size += len(sh.chunks[i].data)
		}
		size = min(max(size/8, minChunk, n), maxChunk)
		if c != nil && c.live == 0 {
			c.data = nil // the old current chunk: free, and no longer appended to
		}
		sh.chunks = append(sh.chunks, answerChunk{data: make([]byte, 0, size)})
		sh.cur = sh.chunk0 + uint64(len(sh.chunks)-1)
		sh.trim()
		c = &sh.chunks[sh.cur-sh.chunk0]
	}
	off = len(c.data)
	c.data = append(c.data, answer...)
	c.live++
	return sh.cur, off, n
}

// answer returns r's answer, aliasing its chunk.
func (sh *localShard) answer(r *localRecord) []byte {
	c := &sh.chunks[r.chunk-sh.chunk0]
	return c.data[r.off : r.off+r.n : r.off+r.n]
}

// release notes that an answer of chunk id is no longer kept, freeing the
// chunk when it was its last (unless answers are still appended to it).
func (sh *localShard) release(id uint64) {
	c := &sh.chunks[id-sh.chunk0]
	if c.live--; c.live == 0 && id != sh.cur {
		c.data = nil
		sh.trim()
	}
}

// trim drops the freed chunks at the head of the shard's list.
func (sh *localShard) trim() {
	n := 0
	for n < len(sh.chunks) && sh.chunks[n].data == nil && sh.chunk0+uint64(n) != sh.cur {
		n++
	}
	if n > 0 {
		sh.chunks = append(sh.chunks[:0], sh.chunks[n:]...)
		sh.chunk0 += uint64(n)
	}
}

// enqueue queues r's expiry.
func (sh *localShard) enqueue(r *localRecord) {
	if sh.head == len(sh.queue) {
		sh.due = r.expires
	}
	sh.queue = append(sh.queue, expiry{r.expires, r.idx})
}

// requeue queues r's expiry, which was at was: in place of the queue's last
// entry when that is r's at was (the entry Begin queued, when no other
// record of the shard was queued since: most often), else as enqueue
// does. The entry replaced would only have been passed over (its time is
// no longer r's), and the one that replaces it is the last, as an
// appended one would be: the queue stays as it would have been, an entry
// shorter, which is 16 bytes of memory less for each request the store
// holds the record of.
func (sh *localShard) requeue(r *localRecord, was int64) {
	last := len(sh.queue) - 1
	if last < sh.head || sh.queue[last] != (expiry{was, r.idx}) {
		sh.enqueue(r)
		return
	}
	sh.queue[last].at = r.expires
	if last == sh.head {
		sh.due = r.expires
	}
}

// sweep removes the records of sh that expired by now, from the head of
// its queue. The queue is in the order records were queued, which is
// the order they expire in as long as the store's terms stay the same;
// a record queued after one that expires later (a reload that shortened
// the ttl) waits for it, and a full shard looks at all of its records
// (all). An entry whose record was queued again since, or is in flight
// under its lease, is skipped: it has a later entry.
func (l *Local) sweep(sh *localShard, now int64, all bool) {
	if now < sh.due && !all {
		return // nothing due: the queue's head is not read (a cache miss, often)
	}
	for sh.head < len(sh.queue) {
		e := sh.queue[sh.head]
		if now < e.at {
			break
		}
		sh.head++
		r := sh.t.rec(e.rec)
		switch {
		case r.state == StateNone || r.expires != e.at:
		case r.at(now) != StateInFlight:
			l.remove(sh, r)
		default:
			// In flight past its record's time: look again at the
			// end of its lease.
			r.expires = r.lease
			sh.enqueue(r)
		}
	}
	if sh.head > 64 && sh.head*2 > len(sh.queue) {
		n := copy(sh.queue, sh.queue[sh.head:])
		sh.queue, sh.head = sh.queue[:n], 0
	}
	sh.due = math.MaxInt64
	if sh.head < len(sh.queue) {
		sh.due = sh.queue[sh.head].at
	}
	if all {
		sh.t.each(func(r *localRecord) bool {
			if now >= r.expires && r.at(now) != StateInFlight {
				l.remove(sh, r)
			}
			return true
		})
	}
}

// Len returns the number of records held, expired ones not yet removed
// included.
func (l *Local) Len() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += sh.t.n
		sh.mu.Unlock()
	}
	return n
}

// Bytes returns the bytes of the answers kept.
func (l *Local) Bytes() int64 { return l.bytes.Load() }
