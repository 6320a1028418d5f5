package cache

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
)

// The collector's pace with memory stores. Go collects when the heap has
// grown by GOGC% (100 by default) of what was live after the last
// collection. A memory store's bodies are live, so a store of 1 GiB would
// let a GiB of garbage gather (the bodies it evicted, say) before the
// next collection: the process would use twice its store. PaceGC sets the
// percentage after each collection so that the growth allowed is GOGC% of
// the heap the stores do not hold, as if they were not there: the process
// then uses its stores' bytes and about twice the rest, as it would
// without them.

var (
	paceMu     sync.Mutex
	pacing     bool
	paceStop   atomic.Bool
	paceStores = map[*Memory]struct{}{}
)

// track adds m to the stores PaceGC counts (NewMemory does); untrack
// drops it (Close).
func track(m *Memory) {
	paceMu.Lock()
	paceStores[m] = struct{}{}
	paceMu.Unlock()
}

func untrack(m *Memory) {
	paceMu.Lock()
	delete(paceStores, m)
	paceMu.Unlock()
}

// PaceGC has the collector's percentage follow the memory stores' bytes
// after every collection, until stop is called (see the comment above),
// unless GOGC is off. Its work is a look at the heap's size after each
// collection. A program calls it once; the binary does when its config
// has a memory store.
func PaceGC() (stop func()) {
	base := 100
	if v := os.Getenv("GOGC"); v != "" {
		if v == "off" {
			return func() {}
		}
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			base = n
		}
	}
	paceMu.Lock()
	defer paceMu.Unlock()
	if pacing {
		return func() {}
	}
	pacing = true
	paceStop.Store(false)
	arm(base)
	return func() {
		paceMu.Lock()
		pacing = false
		paceMu.Unlock()
		paceStop.Store(true)
		debug.SetGCPercent(base)
	}
}

// arm sets a finalizer on a fresh object: it runs after the next
// collection, paces, and arms the next.
func arm(base int) {
	sentinel := new([16]byte)
	runtime.SetFinalizer(sentinel, func(*[16]byte) {
		if paceStop.Load() {
			return
		}
		pace(base)
		arm(base)
	})
}

var (
	liveSample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	lastRest   atomic.Int64
)

// pace sets the collector's percentage from the live heap and the bytes
// the memory stores hold.
func pace(base int) {
	metrics.Read(liveSample)
	if liveSample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	live := int64(liveSample[0].Value.Uint64())
	var held int64
	paceMu.Lock()
	for m := range paceStores {
		held += int64(m.c.WeightedSize())
	}
	paceMu.Unlock()
	rest := max(live-held, 4<<20) // the rest of the heap, at least 4 MiB
	// What was allocated while a collection marked counts as live in it:
	// a burst of bodies arriving then would raise the allowance for the
	// next. The rest may grow by a quarter per collection, no faster
	// (under pressure collections come often: a real growth is followed
	// within a few).
	if prev := lastRest.Load(); prev > 0 {
		rest = min(rest, prev*5/4)
	}
	lastRest.Store(rest)
	pct := int(int64(base) * rest / max(live, rest))
	debug.SetGCPercent(max(pct, 5))
}
