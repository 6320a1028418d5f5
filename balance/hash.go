package balance

import (
	"cmp"
	"slices"
	"sync/atomic"
)

// Hash is consistent hashing on Request.HashKey: a ring with
// VirtualNodes points per unit of weight for each server (weights are first
// divided by their greatest common divisor), placed by hashing the server's
// Addr, and a key goes to the server owning the first point at or after the
// key's hash. Removing one of n servers moves only the keys it held, about
// 1/n of them; adding one moves about 1/(n+1).
//
// When the key's server is not a candidate (it already failed this request,
// or it is down, or it is a backup while a primary is available), the walk
// goes on along the ring to the next server that is, so the replacement is
// also stable. An empty key falls back to smooth weighted round robin.
// Slow start does not change the ring: hashing is about where a key lives,
// not about how much traffic a server takes.
//
// Hashes are 64-bit FNV-1a followed by the SplitMix64 finalizer (FNV-1a alone
// spreads short, similar inputs poorly). Pick takes no lock for a non-empty
// key. The zero value is ready to use; the group builds the ring through
// SetServers.
type Hash struct {
	ring atomic.Pointer[ring]
	rr   RoundRobin
}

// VirtualNodes is the number of ring points per unit of weight.
const VirtualNodes = 160

// maxRingPoints bounds a ring's size; beyond it the points per server are
// scaled down in proportion.
const maxRingPoints = 1 << 20

// Pick implements Policy.
func (h *Hash) Pick(c *Candidates, req Request) *Server {
	r := h.ring.Load()
	if len(req.HashKey) == 0 || r == nil || len(r.hashes) == 0 {
		return h.rr.Pick(c, req)
	}
	n := len(r.hashes)
	start := r.search(keyHash(req.HashKey))
	var last *Server // the last server found not to be a candidate
	for k := range n {
		s := r.owners[(start+k)%n]
		if s == last {
			continue
		}
		if c.contains(s) {
			return s
		}
		last = s
	}
	// No candidate is on the ring: the server list is being replaced.
	return h.rr.Pick(c, req)
}

// SetServers implements ServerSetter: it builds the ring of all.
func (h *Hash) SetServers(all []*Server) {
	h.ring.Store(newRing(all))
	h.rr.SetServers(all)
}

// ring is a sorted array of points and the server owning each.
type ring struct {
	hashes []uint64
	owners []*Server
}

func newRing(all []*Server) *ring {
	g, total := 0, 0
	for _, s := range all {
		g = gcd(g, s.weight())
	}
	for _, s := range all {
		total += VirtualNodes * s.weight() / g
	}
	type point struct {
		h uint64
		s *Server
	}
	pts := make([]point, 0, min(total, maxRingPoints+len(all)))
	for _, s := range all {
		n := VirtualNodes * s.weight() / g
		if total > maxRingPoints {
			n = max(1, int(int64(n)*maxRingPoints/int64(total)))
		}
		seed := fnv1a(s.Addr)
		for i := range n {
			pts = append(pts, point{mix64(seed + uint64(i+1)*0x9e3779b97f4a7c15), s})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(a.s.Addr, b.s.Addr)
	})
	r := &ring{hashes: make([]uint64, len(pts)), owners: make([]*Server, len(pts))}
	for i, p := range pts {
		r.hashes[i], r.owners[i] = p.h, p.s
	}
	return r
}

// search returns the index of the first point at or after h, wrapping to 0.
func (r *ring) search(h uint64) int {
	lo, hi := 0, len(r.hashes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.hashes[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(r.hashes) {
		return 0
	}
	return lo
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv1a(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// keyHash hashes a request's key onto the ring.
func keyHash(b []byte) uint64 {
	h := uint64(fnvOffset)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return mix64(h)
}

// mix64 is the SplitMix64 finalizer: every input bit affects every output
// bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
