package cache

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// Memory is a store that keeps responses in the process's memory, bounded
// in bytes (heads, bodies and its index, as Meta.Weight counts them), with
// otter's W-TinyLFU eviction: a new response is admitted only when it is
// likelier to be asked for again than the one it would evict, so that a
// scan of objects asked for once does not flush the popular ones, and
// frequency, not recency alone, decides what stays. Responses past their
// Meta.Discard time are dropped.
//
// Bodies are slices of the Go heap, shared with the requests that read
// them: an evicted response stays readable for as long as one is sent.
// The garbage left by evicted bodies is the collector's; PaceGC keeps the
// process's memory near its stores' bounds.
type Memory struct {
	c         *otter.Cache[string, *memEntry]
	idx       *index
	capacity  atomic.Int64
	evictions atomic.Uint64
	purged    atomic.Uint64
	closed    atomic.Bool
}

// memEntry is a stored response in memory, and the Object Get hands out
// for it (shared by every request that reads it: nothing changes it).
type memEntry struct {
	meta   *Meta
	body   []byte
	weight uint32
	obj    Object
}

func newMemEntry(meta *Meta, body []byte, weight uint32) *memEntry {
	e := &memEntry{meta: meta, body: body, weight: weight}
	e.obj = Object{Meta: meta, Body: Body{Size: int64(len(body)), Bytes: body}}
	return e
}

// MinMemory is the smallest memory store: 1 MiB.
const MinMemory = 1 << 20

// NewMemory returns a memory store that holds at most capacity bytes
// (at least MinMemory).
func NewMemory(capacity int64) (*Memory, error) {
	if capacity < MinMemory {
		return nil, fmt.Errorf("cache: a memory store of %d bytes is below the minimum of %d", capacity, MinMemory)
	}
	m := &Memory{idx: newIndex()}
	m.capacity.Store(capacity)
	c, err := otter.New(&otter.Options[string, *memEntry]{
		MaximumWeight: uint64(capacity),
		Weigher:       func(_ string, e *memEntry) uint32 { return e.weight },
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, *memEntry]) time.Duration {
			if d := e.Value.meta.Discard; !d.IsZero() {
				return max(time.Until(d), time.Nanosecond)
			}
			return math.MaxInt64
		}),
		OnAtomicDeletion: func(e otter.DeletionEvent[string, *memEntry]) {
			m.idx.remove(e.Key, e.Value)
			if e.WasEvicted() {
				m.evictions.Add(1)
			}
		},
		// Maintenance (evictions among it) runs on the goroutine that
		// wrote, not on one of otter's own later: the store stays within
		// its bound at every write, rather than holding what a burst of
		// writes would evict until a background pass comes to it.
		Executor: func(fn func()) { fn() },
	})
	if err != nil {
		return nil, fmt.Errorf("cache: memory store: %w", err)
	}
	m.c = c
	track(m)
	return m, nil
}

// Get returns the response stored under key.
func (m *Memory) Get(key string) (*Object, error) {
	e, ok := m.c.GetIfPresent(key)
	if !ok {
		return nil, nil
	}
	return &e.obj, nil
}

// Put stores o, keeping its body's slice. A response larger than the
// store is not kept (nor one otter does not admit).
func (m *Memory) Put(key string, o *Object) error {
	if m.closed.Load() {
		return ErrClosed
	}
	w := o.Meta.Weight(key)
	if w > m.capacity.Load() || w > math.MaxUint32 {
		return nil
	}
	e := newMemEntry(o.Meta, o.Body.Bytes, uint32(w))
	m.c.Compute(key, func(*memEntry, bool) (*memEntry, otter.ComputeOp) {
		// Under the key's lock: the index and the map agree, whatever
		// the order of concurrent puts.
		m.idx.add(key, e, o.Meta.URL, o.Meta.Tags)
		return e, otter.WriteOp
	})
	return nil
}

// Update replaces the Meta of the response under key.
func (m *Memory) Update(key string, meta *Meta) error {
	old, ok := m.c.GetIfPresent(key)
	if !ok {
		return nil
	}
	e := newMemEntry(meta, old.body, uint32(min(meta.Weight(key), math.MaxUint32)))
	m.c.ComputeIfPresent(key, func(cur *memEntry) (*memEntry, otter.ComputeOp) {
		if cur != old {
			return cur, otter.CancelOp // replaced meanwhile: the newer stays
		}
		m.idx.add(key, e, meta.URL, meta.Tags)
		return e, otter.WriteOp
	})
	return nil
}

// Delete removes key.
func (m *Memory) Delete(key string) error {
	m.c.Invalidate(key)
	return nil
}

// Purge removes the responses p selects.
func (m *Memory) Purge(p Purge) (int, error) {
	n := 0
	for _, k := range m.idx.match(&p) {
		if _, ok := m.c.Invalidate(k); ok {
			n++
		}
	}
	m.purged.Add(uint64(n))
	return n, nil
}

// Stats returns the store's counts.
func (m *Memory) Stats() Stats {
	return Stats{
		Objects:   int64(m.c.EstimatedSize()),
		Bytes:     int64(m.c.WeightedSize()),
		Capacity:  m.capacity.Load(),
		Evictions: m.evictions.Load(),
		Purged:    m.purged.Load(),
	}
}

// Resize changes the store's bound (a reload's), evicting what no longer
// fits.
func (m *Memory) Resize(capacity int64) error {
	if capacity < MinMemory {
		return fmt.Errorf("cache: a memory store of %d bytes is below the minimum of %d", capacity, MinMemory)
	}
	m.capacity.Store(capacity)
	m.c.SetMaximum(uint64(capacity))
	return nil
}

// Close drops the store's responses and stops otter's goroutines.
func (m *Memory) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	untrack(m)
	m.c.InvalidateAll()
	m.c.StopAllGoroutines()
	return nil
}
