// Package cache is an HTTP cache (RFC 9111, a shared one) as a route
// phase: responses are stored in a Store (Memory, Disk, or a library
// user's own) and answer later requests without the upstream, through the
// proxy's main line as an upstream's answer would (its response phases,
// any client wire). It validates stale responses with conditional
// requests, collapses concurrent misses for one key into one upstream
// request, answers with a stale response when the upstream fails
// (stale-if-error) or while one background request revalidates it
// (stale-while-revalidate), says what it did in a Cache-Status field
// (RFC 9211), and is purged by URL, prefix and tag, across a fleet
// through Redis.
package cache

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"
)

// Options configure a Cache. The zero value (but for Store) is the
// config's cache: {}.
type Options struct {
	// Name names the cache in metrics and logs (its route's label);
	// StoreName names its store there.
	Name, StoreName string
	// Store keeps the responses; required.
	Store Store
	// Key says what a response is stored under; the zero Key is
	// DefaultKey.
	Key Key
	// LockTimeout is the longest a request for a key whose response
	// another request is fetching waits for it (collapsed forwarding);
	// 0 means DefaultLockTimeout, a negative value no lock at all.
	LockTimeout time.Duration
	// MaxObject is the largest response stored (its body); a larger one
	// passes through. 0 means DefaultMaxObject.
	MaxObject int64
	// StaleIfError and StaleWhileRevalidate are how long past its
	// freshness a stored response may answer when the upstream fails,
	// and while a background request revalidates it, for a response that
	// gives no window of its own (RFC 5861's directives win). 0: only
	// what the response allows.
	StaleIfError, StaleWhileRevalidate time.Duration
	// NoHeuristic turns off heuristic freshness (RFC 9111 §4.2.2): a
	// response without explicit freshness is then not reused without
	// validation.
	NoHeuristic bool
	// DeviceToken is the name Surrogate-Control directives may be
	// targeted at ("max-age=60;sluice"), and the token of the
	// Surrogate-Capability field sent upstream; "" means "sluice".
	DeviceToken string
	// Log receives the cache's own failures (a store that fails); nil
	// means slog.Default().
	Log *slog.Logger
}

// Defaults of the zero Options.
const (
	DefaultLockTimeout = 5 * time.Second
	DefaultMaxObject   = 16 << 20
)

// Cache is a route's HTTP cache, a route phase (route.Route.Phases): a
// proxy.RequestFilter that answers from the store, a
// proxy.UpstreamRequestFilter that makes revalidations conditional, a
// proxy.UpstreamResponseFilter that stores, freshens and invalidates,
// and a proxy.FailToProxy and proxy.AnswerFilter for stale answers and
// the Cache-Status of sluice's own. It is safe for concurrent use.
type Cache struct {
	name        string
	storeName   string
	store       Store
	key         Key
	lockTimeout time.Duration
	maxObject   int64
	sie, swr    time.Duration
	heuristic   bool
	token       string
	capability  string
	log         *slog.Logger

	locks  *locks
	counts counters
}

// counters are a cache's counts, for metrics (Counts).
type counters struct {
	hits, misses, stale, revalidated, collapsed, stored, uncacheable, bypass atomic.Uint64
	background, invalidations                                                atomic.Uint64
}

// Counts are what a Cache did, since it was made.
type Counts struct {
	Hits        uint64 // answered from the store, fresh (304s and ranges included)
	Misses      uint64 // went upstream, nothing usable stored
	Stale       uint64 // answered with a stale response (stale-if-error, stale-while-revalidate)
	Revalidated uint64 // a stale response validated by a 304
	Collapsed   uint64 // waited on another request's fetch and were answered from it
	Stored      uint64 // responses stored
	Uncacheable uint64 // responses that could not be stored
	Bypass      uint64 // requests the cache does not handle (methods, preconditions)
	Background  uint64 // background revalidations started
	Invalidated uint64 // invalidations by unsafe methods
}

// New returns the cache for opts.
func New(opts Options) (*Cache, error) {
	if opts.Store == nil {
		return nil, errors.New("cache: no store")
	}
	c := &Cache{
		name:        opts.Name,
		storeName:   opts.StoreName,
		store:       opts.Store,
		key:         opts.Key,
		lockTimeout: opts.LockTimeout,
		maxObject:   opts.MaxObject,
		sie:         opts.StaleIfError,
		swr:         opts.StaleWhileRevalidate,
		heuristic:   !opts.NoHeuristic,
		token:       opts.DeviceToken,
		log:         opts.Log,
		locks:       newLocks(),
	}
	if c.lockTimeout == 0 {
		c.lockTimeout = DefaultLockTimeout
	}
	if c.maxObject <= 0 {
		c.maxObject = DefaultMaxObject
	}
	if c.token == "" {
		c.token = "sluice"
	}
	c.capability = c.token + `="Surrogate/1.0"`
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.sie < 0 || c.swr < 0 {
		return nil, errors.New("cache: a negative stale window")
	}
	return c, nil
}

// Store returns the cache's store.
func (c *Cache) Store() Store { return c.store }

// Name returns the cache's name.
func (c *Cache) Name() string { return c.name }

// StoreName returns the name of the cache's store.
func (c *Cache) StoreName() string { return c.storeName }

// Counts returns what the cache did.
func (c *Cache) Counts() Counts {
	k := &c.counts
	return Counts{
		Hits: k.hits.Load(), Misses: k.misses.Load(), Stale: k.stale.Load(),
		Revalidated: k.revalidated.Load(), Collapsed: k.collapsed.Load(), Stored: k.stored.Load(),
		Uncacheable: k.uncacheable.Load(), Bypass: k.bypass.Load(), Background: k.background.Load(),
		Invalidated: k.invalidations.Load(),
	}
}

// HitRatio is the share of the requests a cache looked up that it
// answered without the upstream sending a body: fresh hits, stale answers
// and requests collapsed onto another's fetch, over those and the misses
// and revalidations. NaN when there were none.
func (c Counts) HitRatio() float64 {
	served := float64(c.Hits + c.Stale + c.Collapsed)
	return served / (served + float64(c.Misses+c.Revalidated))
}

// Each calls f with each count and its name, in the words of metrics
// (hit, miss, stale, revalidated, collapsed, stored, uncacheable, bypass,
// background, invalidated).
func (c Counts) Each(f func(result string, n uint64)) {
	f("hit", c.Hits)
	f("miss", c.Misses)
	f("stale", c.Stale)
	f("revalidated", c.Revalidated)
	f("collapsed", c.Collapsed)
	f("stored", c.Stored)
	f("uncacheable", c.Uncacheable)
	f("bypass", c.Bypass)
	f("background", c.Background)
	f("invalidated", c.Invalidated)
}
