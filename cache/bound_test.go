package cache

import (
	"container/list"
	"math/rand/v2"
	"strconv"
	"testing"
)

// lru is the baseline a memory store's hit ratio is measured against: the
// least recently used entry goes first, bounded by bytes.
type lru struct {
	capacity, size int64
	order          *list.List
	items          map[string]*list.Element
}

type lruItem struct {
	key  string
	size int64
}

func newLRU(capacity int64) *lru {
	return &lru{capacity: capacity, order: list.New(), items: map[string]*list.Element{}}
}

func (l *lru) get(key string) bool {
	if e, ok := l.items[key]; ok {
		l.order.MoveToFront(e)
		return true
	}
	return false
}

func (l *lru) put(key string, size int64) {
	if size > l.capacity {
		return
	}
	l.items[key] = l.order.PushFront(&lruItem{key, size})
	l.size += size
	for l.size > l.capacity {
		e := l.order.Back()
		it := e.Value.(*lruItem)
		l.order.Remove(e)
		delete(l.items, it.key)
		l.size -= it.size
	}
}

// TestHitRatio: on a Zipf-distributed load (100,000 objects of 1-64 KiB,
// 400,000 requests, each miss stored), a 64 MiB memory store (W-TinyLFU)
// answers at least as many requests as an LRU of the same bytes. Both
// ratios are logged; with the README's figures.
func TestHitRatio(t *testing.T) {
	if testing.Short() {
		t.Skip("400,000 requests")
	}
	const objects, requests, capacity = 100_000, 400_000, 64 << 20
	sizes := make([]int64, objects)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range sizes {
		sizes[i] = int64(1024 + r.IntN(63<<10))
	}
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.01, 1, objects-1)
	m, err := NewMemory(capacity)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	base := newLRU(capacity)
	var storeHits, lruHits int
	bodies := map[int64][]byte{}
	for i := 0; i < requests; i++ {
		n := zipf.Uint64()
		key := "http://example.com/" + strconv.FormatUint(n, 10)
		size := sizes[n]
		o, _ := m.Get(key)
		if o != nil {
			storeHits++
		} else {
			body := bodies[size]
			if body == nil {
				body = make([]byte, size)
				bodies[size] = body
			}
			meta := &Meta{URL: key, Status: 200, Size: size}
			m.Put(key, &Object{Meta: meta, Body: Body{Size: size, Bytes: body}})
		}
		// The LRU counts the same bytes as the store does for each entry.
		w := (&Meta{URL: key, Status: 200, Size: size}).Weight(key)
		if base.get(key) {
			lruHits++
		} else {
			base.put(key, w)
		}
	}
	storeRatio, lruRatio := float64(storeHits)/requests, float64(lruHits)/requests
	t.Logf("hit ratio: memory store (W-TinyLFU) %.3f, LRU %.3f", storeRatio, lruRatio)
	if storeRatio < lruRatio {
		t.Errorf("the memory store's hit ratio %.3f is below LRU's %.3f", storeRatio, lruRatio)
	}
}
