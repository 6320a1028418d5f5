package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/sluice-proxy/sluice/cache"
)

// The running form of the cache sections: a slot per store, which routes'
// caches reach their store through. Build makes the slots; Start opens
// their stores, or Carry hands a reload's new generation the stores of
// the old one that stay, their responses kept; Close closes those no later
// generation took.

// storeSlot is a store of a generation.
type storeSlot struct {
	spec CacheStore
	ref  *storeRef
	// taken is set once a later generation took the store (Carry): the
	// generation's Close leaves it open.
	taken bool
}

// storeRef is the cache.Store a route's cache is built with: it forwards
// to the store the slot holds, once opened. Before (a generation built
// only to be validated), nothing is stored or found.
type storeRef struct {
	p atomic.Pointer[storeBox]
}

type storeBox struct{ s cache.Store }

func (r *storeRef) get() cache.Store {
	if b := r.p.Load(); b != nil {
		return b.s
	}
	return nil
}

func (r *storeRef) set(s cache.Store) { r.p.Store(&storeBox{s}) }

var errNotOpen = errors.New("cache store not open")

func (r *storeRef) Get(key string) (*cache.Object, error) {
	if s := r.get(); s != nil {
		return s.Get(key)
	}
	return nil, nil
}

func (r *storeRef) Put(key string, o *cache.Object) error {
	if s := r.get(); s != nil {
		return s.Put(key, o)
	}
	return errNotOpen
}

func (r *storeRef) Update(key string, m *cache.Meta) error {
	if s := r.get(); s != nil {
		return s.Update(key, m)
	}
	return errNotOpen
}

func (r *storeRef) Delete(key string) error {
	if s := r.get(); s != nil {
		return s.Delete(key)
	}
	return nil
}

func (r *storeRef) Purge(p cache.Purge) (int, error) {
	if s := r.get(); s != nil {
		return s.Purge(p)
	}
	return 0, nil
}

func (r *storeRef) Stats() cache.Stats {
	if s := r.get(); s != nil {
		return s.Stats()
	}
	return cache.Stats{}
}

func (r *storeRef) Close() error { return nil } // the slot's to close

// cacheStores returns the stores a config defines: its cache section's,
// or, when a route caches without one, the default memory store.
func cacheStores(cfg *Config) []CacheStore {
	if cfg.Cache != nil {
		return cfg.Cache.Stores
	}
	for _, r := range cfg.Routes {
		if r.Cache != nil {
			return []CacheStore{{Name: DefaultCacheStore, Memory: DefaultCacheMemory}}
		}
	}
	return nil
}

// buildCaches makes g's store slots.
func (g *Generation) buildCaches(cfg *Config) {
	for _, st := range cacheStores(cfg) {
		if g.stores == nil {
			g.stores = make(map[string]*storeSlot)
		}
		g.stores[st.Name] = &storeSlot{spec: st, ref: &storeRef{}}
		g.storeOrder = append(g.storeOrder, st.Name)
	}
}

// routeCache builds the cache phase of route r.
func (g *Generation) routeCache(r Route) (*cache.Cache, error) {
	rc := r.Cache
	slot := g.stores[rc.Store]
	if slot == nil {
		return nil, fmt.Errorf("cache: no store %q", rc.Store) // validated by Parse
	}
	lock := rc.LockTimeout
	if lock == 0 {
		lock = -1 // lock.timeout: 0s, no lock
	}
	c, err := cache.New(cache.Options{
		Name:                 routeName(r),
		StoreName:            rc.Store,
		Store:                slot.ref,
		Key:                  rc.key,
		LockTimeout:          lock,
		MaxObject:            rc.MaxObject,
		StaleIfError:         rc.StaleIfError,
		StaleWhileRevalidate: rc.StaleWhileRevalidate,
		NoHeuristic:          !rc.Heuristic,
	})
	if err != nil {
		return nil, err
	}
	g.caches = append(g.caches, c)
	return c, nil
}

// carryStores hands g the stores of old that g defines alike (the same
// kind, and for a disk store the same directory), resized to g's sizes,
// their responses kept.
func (g *Generation) carryStores(old *Generation) {
	for name, slot := range g.stores {
		o := old.stores[name]
		if o == nil || o.taken || !sameStoreKind(o.spec, slot.spec) {
			continue
		}
		s := o.ref.get()
		if s == nil {
			continue
		}
		if err := resizeStore(s, slot.spec); err != nil {
			slog.Default().Error("cache store kept at its size", "store", name, "error", err)
		}
		slot.ref.set(s)
		o.taken = true
	}
}

// sameStoreKind reports whether a store of spec a may go on as one of
// spec b: both in memory, or both on the same directory (with or without
// a memory tier, alike).
func sameStoreKind(a, b CacheStore) bool {
	switch {
	case a.Disk == nil && b.Disk == nil:
		return true
	case a.Disk != nil && b.Disk != nil:
		return a.Disk.Path == b.Disk.Path && (a.Memory == 0) == (b.Memory == 0)
	}
	return false
}

func resizeStore(s cache.Store, spec CacheStore) error {
	switch s := s.(type) {
	case *cache.Memory:
		return s.Resize(spec.Memory)
	case *cache.Disk:
		return s.Resize(spec.Disk.Size)
	case *cache.Tiered:
		if d, ok := s.Back.(*cache.Disk); ok {
			if err := d.Resize(spec.Disk.Size); err != nil {
				return err
			}
		}
		return s.Front.Resize(spec.Memory)
	}
	return nil
}

// openStores opens the stores no earlier generation handed over. A store
// that fails to open leaves its routes' caches passing every request
// through, and says why.
func (g *Generation) openStores(log *slog.Logger) {
	for _, name := range g.storeOrder {
		slot := g.stores[name]
		if slot.ref.get() != nil {
			continue
		}
		s, err := openStore(slot.spec, log)
		if err != nil {
			log.Error("cache store not opened; its routes' requests pass through", "store", name, "error", err)
			continue
		}
		slot.ref.set(s)
	}
}

func openStore(spec CacheStore, log *slog.Logger) (cache.Store, error) {
	if spec.Disk == nil {
		return cache.NewMemory(spec.Memory)
	}
	d, err := cache.OpenDisk(cache.DiskOptions{Path: spec.Disk.Path, Size: spec.Disk.Size, Log: log})
	if err != nil {
		return nil, err
	}
	if spec.Memory == 0 {
		return d, nil
	}
	m, err := cache.NewMemory(spec.Memory)
	if err != nil {
		d.Close()
		return nil, err
	}
	return &cache.Tiered{Front: m, Back: d}, nil
}

// closeStores closes the stores no later generation took.
func (g *Generation) closeStores() {
	for _, slot := range g.stores {
		if s := slot.ref.get(); s != nil && !slot.taken {
			s.Close()
		}
	}
	if g.fleet != nil {
		g.fleet.Close()
	}
}

// startFleet starts g's purge subscriber, with a redis section: purges
// published by any sluice sharing the server reach g's stores.
func (g *Generation) startFleet(ctx context.Context) {
	if g.fleet != nil {
		g.fleet.Start(ctx)
	}
}

// PurgeCache removes what p selects from every store of g, and has every
// sluice sharing the redis section's server do the same; it returns how
// many responses g's stores held.
func (g *Generation) PurgeCache(ctx context.Context, p cache.Purge) (int, error) {
	n := g.purgeLocal(p)
	if g.fleet != nil {
		if err := g.fleet.Publish(ctx, p); err != nil {
			return n, fmt.Errorf("purged here, not published to the fleet: %w", err)
		}
	}
	return n, nil
}

// purgeLocal removes what p selects from g's stores.
func (g *Generation) purgeLocal(p cache.Purge) int {
	n := 0
	for _, name := range g.storeOrder {
		k, err := g.stores[name].ref.Purge(p)
		if err != nil {
			slog.Default().Error("cache purge", "store", name, "error", err)
		}
		n += k
	}
	return n
}

// CacheStores reports each store's counts, for metrics and the status
// page, in the order of the file.
func (g *Generation) CacheStores(report func(name string, s cache.Stats)) {
	for _, name := range g.storeOrder {
		report(name, g.stores[name].ref.Stats())
	}
}

// Caches reports each caching route's counts: the route's name and what
// its cache did.
func (g *Generation) Caches(report func(route, store string, c cache.Counts)) {
	for _, c := range g.caches {
		report(c.Name(), c.StoreName(), c.Counts())
	}
}

// CacheStoreState is a store's counts, and what the caches of the routes
// that use it did, summed.
type CacheStoreState struct {
	Name string
	// Kind is memory, disk, or disk+memory.
	Kind   string
	Stats  cache.Stats
	Counts cache.Counts
}

// CacheStates returns each store's state, in the order of the file.
func (g *Generation) CacheStates() []CacheStoreState {
	var out []CacheStoreState
	for _, name := range g.storeOrder {
		slot := g.stores[name]
		st := CacheStoreState{Name: name, Kind: "memory", Stats: slot.ref.Stats()}
		if slot.spec.Disk != nil {
			st.Kind = "disk"
			if slot.spec.Memory > 0 {
				st.Kind = "disk+memory"
			}
		}
		for _, c := range g.caches {
			if c.StoreName() == name {
				st.Counts = addCounts(st.Counts, c.Counts())
			}
		}
		out = append(out, st)
	}
	return out
}

func addCounts(a, b cache.Counts) cache.Counts {
	return cache.Counts{Hits: a.Hits + b.Hits, Misses: a.Misses + b.Misses, Stale: a.Stale + b.Stale,
		Revalidated: a.Revalidated + b.Revalidated, Collapsed: a.Collapsed + b.Collapsed, Stored: a.Stored + b.Stored,
		Uncacheable: a.Uncacheable + b.Uncacheable, Bypass: a.Bypass + b.Bypass, Background: a.Background + b.Background,
		Invalidated: a.Invalidated + b.Invalidated}
}

// CacheStore returns the store named name (nil when g has none so
// named), as the routes' caches reach it.
func (g *Generation) CacheStore(name string) cache.Store {
	if slot := g.stores[name]; slot != nil {
		return slot.ref
	}
	return nil
}
