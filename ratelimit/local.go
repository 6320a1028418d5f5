package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"
)

// Store keeps each key's GCRA state and decides requests against it. It
// is safe for concurrent use.
type Store interface {
	// Take decides one request of key, made at now, under p, spending a
	// unit of the key's budget if it has one. key is only read during the
	// call. A store may keep time by its own clock instead of now (Redis
	// does, so that a fleet shares one clock). An error says the store
	// could not decide (Redis unreachable or slow); the Limiter then
	// follows its OnStoreError.
	Take(key []byte, p Policy, now time.Time) (Decision, error)
}

// DefaultMaxKeys is the number of keys a Local store holds when its
// MaxKeys is 0.
const DefaultMaxKeys = 100_000

// localShards is the number of independently locked parts of a Local
// store.
const localShards = 64

// evictSample is how many entries a full shard looks at to make room.
const evictSample = 8

// Local is a Store in this process's memory: a map from key to theoretical
// arrival time, split into 64 shards, each with its own lock.
//
// Its size is bounded: it holds at most maxKeys keys (rounded up to a
// multiple of 64), each about 100 bytes with its key and the map's
// overhead (measured: 99 bytes for an IPv4 address, 130 for an IPv6 one),
// so a flood of distinct client addresses cannot grow it without bound:
// the default 100,000 keys are 10 to 13 MB. A new key
// in a full shard takes the place of one of a few entries sampled from
// it: a stale one (whose budget is whole again, so that forgetting it
// changes nothing) if there is one, else the one closest to a whole budget,
// whose client then gets its budget back early.
type Local struct {
	perShard int
	seed     maphash.Seed
	epoch    time.Time // times are kept as nanoseconds since
	shards   [localShards]shard
}

type shard struct {
	mu sync.Mutex
	m  map[string]*int64 // key -> theoretical arrival time
	_  [40]byte          // keeps neighbouring shards' locks off one cache line
}

// NewLocal returns an empty Local store of at most maxKeys keys; 0 means
// DefaultMaxKeys.
func NewLocal(maxKeys int) *Local {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	l := &Local{
		perShard: (maxKeys + localShards - 1) / localShards,
		seed:     maphash.MakeSeed(),
		epoch:    time.Now(),
	}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*int64)
	}
	return l
}

// Take implements Store; it never fails. now is best read from a
// monotonic clock (time.Now, or a proxy.Session's Start).
func (l *Local) Take(key []byte, p Policy, t time.Time) (Decision, error) {
	sh := &l.shards[maphash.Bytes(l.seed, key)%localShards]
	interval := int64(p.Rate.Interval())
	now := int64(t.Sub(l.epoch))
	sh.mu.Lock()
	// The lookup does not copy key, and a key held is updated in place:
	// only a new key allocates.
	tat := sh.m[string(key)]
	if tat != nil {
		var d Decision
		*tat, d = gcra(*tat, now, interval, p.burst())
		sh.mu.Unlock()
		return d, nil
	}
	next, d := gcra(0, now, interval, p.burst())
	if len(sh.m) >= l.perShard {
		sh.evict(now)
	}
	sh.m[string(key)] = &next
	sh.mu.Unlock()
	return d, nil
}

// evict removes from a full shard the stale entries among a few sampled,
// or if none is stale, the sampled entry with the earliest theoretical
// arrival time. Go's map iteration starts at a random place, so the
// sample differs from call to call; the work per new key stays small
// however large the map.
func (sh *shard) evict(now int64) {
	var oldest string
	var oldestTAT int64
	found, removed, n := false, false, 0
	for k, p := range sh.m {
		tat := *p
		switch {
		case tat <= now:
			delete(sh.m, k)
			removed = true
		case !found || tat < oldestTAT:
			oldest, oldestTAT, found = k, tat, true
		}
		if n++; n >= evictSample {
			break
		}
	}
	if !removed && found {
		delete(sh.m, oldest)
	}
}

// Len returns the number of keys held.
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
