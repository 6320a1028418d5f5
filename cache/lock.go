package cache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// Collapsed forwarding: concurrent misses for one key send one request
// upstream (the writer's); the others wait for what becomes of it, at most
// the lock's timeout (pingora's cache lock, nginx's proxy_cache_lock,
// Varnish's request coalescing).

// outcome is what became of a writer's request, as its waiters learn it.
type outcome uint8

const (
	pending     outcome = iota
	filling             // the response is being stored: read it from the fill as it comes
	stored              // a response was stored or freshened: look it up
	uncacheable         // the response cannot be stored: go upstream yourself, at once
	failed              // no response came: one waiter takes over as writer
	erred               // the upstream failed and a stale response answered: answer with it too if you may
)

// flight is one writer's request for a key, which waiters wait on.
type flight struct {
	key   string
	ready chan struct{} // closed once outcome is set
	// outcome and fill are set once, before ready is closed, and read
	// after it is.
	outcome outcome
	fill    *fill
	// released is set (under the locks' mutex) once the flight left the
	// table: no new waiter finds it.
	released bool
	// waiters counts the requests waiting for the outcome.
	waiters atomic.Int32
}

// locks is the table of flights, by key.
type locks struct {
	seed   maphash.Seed
	shards [16]lockShard
	// uncacheable remembers keys whose responses could not be stored, for
	// a while, so that the next burst of requests for one goes upstream
	// at once instead of queuing behind a writer whose answer will not be
	// shared either (pingora's predictor).
	memory predictor
}

type lockShard struct {
	mu sync.Mutex
	m  map[string]*flight
}

func newLocks() *locks {
	l := &locks{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*flight)
	}
	l.memory.init(predictorSize, predictorTTL)
	return l
}

func (l *locks) shard(key string) *lockShard {
	return &l.shards[maphash.String(l.seed, key)%uint64(len(l.shards))]
}

// acquire returns the flight for key, and whether the caller is its writer
// (a new flight) rather than a waiter on another's.
func (l *locks) acquire(key string) (*flight, bool) {
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f := sh.m[key]; f != nil {
		return f, false
	}
	f := &flight{key: key, ready: make(chan struct{})}
	sh.m[key] = f
	return f, true
}

// inFlight reports whether a writer holds key.
func (l *locks) inFlight(key string) bool {
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[key] != nil
}

// publish tells f's waiters what became of it, once: a later call does
// nothing. With filling the flight stays in the table, for requests that
// come while the body arrives to read it too, until finish; any other
// outcome takes it out.
func (l *locks) publish(f *flight, o outcome, fl *fill) {
	sh := l.shard(f.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f.outcome != pending {
		if o != filling && !f.released {
			l.remove(sh, f)
		}
		return
	}
	f.outcome, f.fill = o, fl
	close(f.ready)
	if o != filling {
		l.remove(sh, f)
	}
	if o == uncacheable {
		l.memory.add(f.key)
	}
}

// finish takes a flight out of the table once its fill ended.
func (l *locks) finish(f *flight) {
	sh := l.shard(f.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f.outcome == pending {
		f.outcome = failed
		close(f.ready)
	}
	if !f.released {
		l.remove(sh, f)
	}
}

func (l *locks) remove(sh *lockShard, f *flight) {
	f.released = true
	if sh.m[f.key] == f {
		delete(sh.m, f.key)
	}
}

// wait waits for f's outcome until deadline; false when the deadline
// passed first.
func (f *flight) wait(deadline time.Time) bool {
	select {
	case <-f.ready:
		return true
	default:
	}
	f.waiters.Add(1)
	defer f.waiters.Add(-1)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-f.ready:
		return true
	case <-t.C:
		return false
	}
}

// predictorSize and predictorTTL bound the memory of uncacheable keys:
// the keys remembered, and for how long.
const (
	predictorSize = 16384
	predictorTTL  = 30 * time.Second
)

// predictor remembers keys for a while, at most size of them (one
// remembered past that takes the place of an arbitrary one).
type predictor struct {
	mu   sync.Mutex
	m    map[string]time.Time
	size int
	ttl  time.Duration
}

func (p *predictor) init(size int, ttl time.Duration) {
	p.m, p.size, p.ttl = make(map[string]time.Time), size, ttl
}

func (p *predictor) add(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.m) >= p.size {
		for k := range p.m {
			delete(p.m, k)
			break
		}
	}
	p.m[key] = time.Now().Add(p.ttl)
}

// has reports whether key is remembered.
func (p *predictor) has(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.m[key]
	if ok && time.Now().After(until) {
		delete(p.m, key)
		return false
	}
	return ok
}

// forget drops key: a response for it was stored after all.
func (p *predictor) forget(key string) {
	p.mu.Lock()
	delete(p.m, key)
	p.mu.Unlock()
}
