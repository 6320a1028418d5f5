package idempotency

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestRecordTable runs random adds and removes on a recordTable beside a
// map, with keys whose tags crowd a few homes (long runs of slots, runs
// that wrap around the table's end, removals from their middle), and
// checks after each step that every key held is found with its record,
// that no other is, and that each visits every record once.
func TestRecordTable(t *testing.T) {
	for _, homes := range []uint32{1, 3, 15, 0} { // 0: any tag
		rng := rand.New(rand.NewPCG(1, uint64(homes)))
		var tbl recordTable
		held := make(map[Key]Token)
		tags := make(map[Key]uint32)
		key := func(i int) Key {
			var k Key
			binary.LittleEndian.PutUint64(k[:], uint64(i))
			// Tags near 0 and near the top: runs wrap around the end.
			g := rng.Uint32()
			if homes > 0 {
				g %= homes
			}
			if rng.IntN(2) == 0 {
				g = ^g
			}
			tags[k] = g
			return k
		}
		var keys []Key
		for step := range 3000 {
			if len(keys) == 0 || rng.IntN(3) > 0 {
				k := key(step)
				if tbl.get(&k, tags[k]) != nil {
					t.Fatalf("step %d: a new key found", step)
				}
				r := tbl.add(&k, tags[k])
				r.token = Token{byte(step), byte(step >> 8)}
				held[k] = r.token
				keys = append(keys, k)
			} else {
				i := rng.IntN(len(keys))
				k := keys[i]
				keys[i] = keys[len(keys)-1]
				keys = keys[:len(keys)-1]
				tbl.remove(&k, tags[k])
				delete(held, k)
				if tbl.get(&k, tags[k]) != nil {
					t.Fatalf("step %d: a removed key found", step)
				}
			}
			if tbl.n != len(held) {
				t.Fatalf("step %d: %d records, want %d", step, tbl.n, len(held))
			}
			if step%97 != 0 {
				continue
			}
			for k, tok := range held {
				if r := tbl.get(&k, tags[k]); r == nil || r.key != k || r.token != tok {
					t.Fatalf("step %d: key %x: %+v", step, k[:12], r)
				}
			}
			seen := make(map[Key]int)
			tbl.each(func(r *localRecord) bool { seen[r.key]++; return true })
			if len(seen) != len(held) {
				t.Fatalf("step %d: each visited %d records, want %d", step, len(seen), len(held))
			}
			for k, n := range seen {
				if _, ok := held[k]; !ok || n != 1 {
					t.Fatalf("step %d: each visited %x %d times, held %v", step, k[:12], n, ok)
				}
			}
		}
		// Removing while visiting: every record whose token is odd, each
		// visited at least once, none left.
		odd := 0
		tbl.each(func(r *localRecord) bool {
			if r.token[0]%2 == 1 {
				delete(held, r.key)
				tbl.remove(&r.key, tags[r.key])
				odd++
			}
			return true
		})
		for k := range held {
			if tbl.get(&k, tags[k]) == nil {
				t.Errorf("homes %d: %x lost by removals while visiting", homes, k[:12])
			}
		}
		tbl.each(func(r *localRecord) bool {
			if r.token[0]%2 == 1 {
				t.Errorf("homes %d: %x left after it was removed", homes, r.key[:12])
			}
			return true
		})
		if odd == 0 || tbl.n != len(held) {
			t.Errorf("homes %d: removed %d while visiting, %d records left, want %d", homes, odd, tbl.n, len(held))
		}
	}
}
