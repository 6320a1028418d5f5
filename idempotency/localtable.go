package idempotency

// recordTable is a shard's records by key: an open-addressed hash table
// of 8-byte slots (linear probing), each holding a tag of the key and the
// index of its record, and the records themselves in pages. It is a
// Go map made for a table of a day's keys, larger than the CPU's caches:
//
//   - a lookup of a new key (every claim) reads only slots, 16 bytes a
//     record at most, where a map reads the key's group of 8 slots of
//     key and value (a kilobyte); the slots of 64 shards holding a few
//     hundred thousand keys take a few megabytes, which mostly stay in
//     the cache, and the records are read only for the key found;
//   - records never move (pages are not reallocated as the table grows;
//     a map copies every key and value when it does), so a record is
//     read and changed in place, and growing rewrites only the slots;
//   - nothing in it is a pointer but the pages themselves: the garbage
//     collector marks a few blocks, whatever the number of records.
//
// A key's tag is 32 bits of its hash under the store's secret seed (see
// Local.hash), which the table is given with the key: keys are SHA-256
// digests of what clients send, and a client that could choose their
// bits could crowd one home with them (hash flooding), as it cannot
// choose the bits of a hash it does not know the seed of. A slot's home
// is its tag modulo the table's size, so that growing and removing need
// no record read. A removal shifts the slots after it back (no
// tombstones), so the table never needs rebuilding. The zero recordTable
// is empty and ready.
type recordTable struct {
	slots []uint64 // 0 is free; else tag<<32 | index+1; a power of two long
	pages [][]localRecord
	free  []uint32 // indexes of records not in use
	n     int      // records in use
}

const (
	pageShift = 8 // records per page: 256 (32 KiB)
	pageSize  = 1 << pageShift
)

// rec returns the record at index i.
func (t *recordTable) rec(i uint32) *localRecord { return &t.pages[i>>pageShift][i&(pageSize-1)] }

// find returns the record of k, whose tag is g, or nil; pos is its slot,
// or the free slot where k would go.
func (t *recordTable) find(k *Key, g uint32) (r *localRecord, pos int) {
	if len(t.slots) == 0 {
		return nil, -1
	}
	mask := len(t.slots) - 1
	for i := int(g) & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return nil, i
		}
		if uint32(s>>32) == g {
			if r := t.rec(uint32(s) - 1); r.key == *k {
				return r, i
			}
		}
	}
}

// get returns the record of k, whose tag is g, or nil.
func (t *recordTable) get(k *Key, g uint32) *localRecord {
	r, _ := t.find(k, g)
	return r
}

// add adds a record for k, whose tag is g and which has none, and returns it with its key
// and index set; the caller sets the rest (a record freed by remove is
// zero).
func (t *recordTable) add(k *Key, g uint32) *localRecord {
	if (t.n+1)*2 > len(t.slots) {
		t.grow()
	}
	_, pos := t.find(k, g)
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		i = uint32(t.n)
		if int(i>>pageShift) == len(t.pages) {
			t.pages = append(t.pages, make([]localRecord, pageSize))
		}
	}
	t.slots[pos] = uint64(g)<<32 | uint64(i+1)
	t.n++
	r := t.rec(i)
	r.key, r.idx = *k, i
	return r
}

// grow doubles the slots (16 at first), placing each again by its tag.
func (t *recordTable) grow() {
	old := t.slots
	t.slots = make([]uint64, max(16, 2*len(old)))
	mask := len(t.slots) - 1
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := int(s>>32) & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// remove removes the record of k, whose tag is g, if there is one.
func (t *recordTable) remove(k *Key, g uint32) {
	r, pos := t.find(k, g)
	if r == nil {
		return
	}
	idx := uint32(t.slots[pos]) - 1
	*r = localRecord{}
	t.free = append(t.free, idx)
	t.n--
	// Shift back the slots after pos that would not be found past the
	// gap (their home is not cyclically within (pos, j]).
	mask := len(t.slots) - 1
	t.slots[pos] = 0
	for j := (pos + 1) & mask; t.slots[j] != 0; j = (j + 1) & mask {
		home := int(t.slots[j]>>32) & mask
		if pos <= j && pos < home && home <= j || pos > j && (pos < home || home <= j) {
			continue
		}
		t.slots[pos], t.slots[j] = t.slots[j], 0
		pos = j
	}
}

// each calls f with each record, until f returns false. f may remove the
// record it is given (and no other): a record a removal shifts back
// past the one f was given is then visited again, which f must allow.
func (t *recordTable) each(f func(*localRecord) bool) {
	for i := 0; i < len(t.slots); i++ {
		for s := t.slots[i]; s != 0; s = t.slots[i] {
			if !f(t.rec(uint32(s) - 1)) {
				return
			}
			if t.slots[i] == s {
				break // not removed: on to the next slot
			}
		}
	}
}
