package balance

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Policy chooses one server among candidates. The group has already applied
// every rule that does not depend on the policy (this request's failed
// tries, health, backups, panic mode), so Pick only chooses; it must return
// one of c.Servers.
//
// A Policy value serves one Group: stateful policies (RoundRobin,
// LeastRequest's tie-breaking, Hash's ring) keep per-group state. Pick is
// called concurrently and should not allocate.
type Policy interface {
	Pick(c *Candidates, req Request) *Server
}

// ServerSetter is implemented by policies that precompute over all of a
// group's servers (Hash builds its ring from them) or keep per-server state.
// The group calls SetServers with every server, in configured order, before
// the first Pick and again whenever its servers change (DNS, Carry); Picks
// may still see the previous list for a moment.
type ServerSetter interface {
	SetServers(all []*Server)
}

// Candidates are the servers a policy may choose from for one Pick. They
// are valid only during that Pick.
type Candidates struct {
	// Servers are the candidates, in the group's configured order
	// (len >= 1).
	Servers []*Server
	// Weights[i] is Servers[i]'s effective weight: its configured Weight
	// times 1000, less while the server is in slow start; always >= 1.
	Weights []int64
	// Now is the group's clock at the start of the Pick.
	Now time.Time
	// Rand is the group's random source; nil means the math/rand/v2
	// global source.
	Rand rand.Source
}

var candidatesPool = sync.Pool{New: func() any { return new(Candidates) }}

func (c *Candidates) add(s *Server, w int64) {
	c.Servers = append(c.Servers, s)
	c.Weights = append(c.Weights, w)
}

func (c *Candidates) reset() {
	clear(c.Servers)
	c.Servers, c.Weights, c.Rand = c.Servers[:0], c.Weights[:0], nil
}

// Uint64N returns a uniform random number in [0, n) from c.Rand; n > 0.
func (c *Candidates) Uint64N(n uint64) uint64 { return randN(c.Rand, n) }

// randN returns a uniform random number in [0, n) from src (the global
// source when nil); n > 0.
func randN(src rand.Source, n uint64) uint64 {
	if src == nil {
		return rand.Uint64N(n)
	}
	// Lemire's multiply-shift with rejection: unbiased, no division in the
	// common case.
	hi, lo := bits.Mul64(src.Uint64(), n)
	if lo < n {
		for thresh := -n % n; lo < thresh; {
			hi, lo = bits.Mul64(src.Uint64(), n)
		}
	}
	return hi
}

// contains reports whether s is a candidate.
func (c *Candidates) contains(s *Server) bool {
	for _, x := range c.Servers {
		if x == s {
			return true
		}
	}
	return false
}

// RoundRobin is smooth weighted round robin, exactly nginx's: on each pick
// every candidate's current weight grows by its effective weight, the
// candidate with the largest current weight wins (the first in configured
// order on a tie) and loses the sum of the candidates' effective weights.
// Weights 5, 1, 1 give a a b a c a a. It is deterministic. Servers that are
// not candidates (tried, down) keep their current weight untouched.
//
// Picks are serialized by a mutex held for one pass over the candidates.
// The zero value is ready to use.
type RoundRobin struct {
	mu      sync.Mutex
	current map[*Server]int64
}

// Pick implements Policy.
func (p *RoundRobin) Pick(c *Candidates, _ Request) *Server {
	return c.Servers[p.pick(c, nil)]
}

// pick runs one round over the candidates i for which in(i) holds (all of
// them when in is nil) and returns the winner's index, or -1 when in admits
// none.
func (p *RoundRobin) pick(c *Candidates, in func(i int) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current == nil {
		p.current = make(map[*Server]int64)
	}
	best, bestW, total := -1, int64(0), int64(0)
	for i, s := range c.Servers {
		if in != nil && !in(i) {
			continue
		}
		w := c.Weights[i]
		cw := p.current[s] + w
		p.current[s] = cw
		total += w
		if best < 0 || cw > bestW {
			best, bestW = i, cw
		}
	}
	if best >= 0 {
		p.current[c.Servers[best]] = bestW - total
	}
	return best
}

// SetServers implements ServerSetter: it forgets servers that left.
func (p *RoundRobin) SetServers(all []*Server) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.current {
		if !slices.Contains(all, s) {
			delete(p.current, s)
		}
	}
}

// LeastRequest picks the candidate with the fewest outstanding tries
// relative to its effective weight (outstanding/weight, as nginx's
// least_conn), breaking ties by smooth weighted round robin, so that an idle
// group is served in exact weight proportions. Outstanding tries are counted
// by the group: Pick adds one, Report takes it back.
//
// The zero value is ready to use.
type LeastRequest struct {
	rr RoundRobin
}

// Pick implements Policy.
func (p *LeastRequest) Pick(c *Candidates, req Request) *Server {
	best, ties := 0, 1
	bo, bw := c.Servers[0].Outstanding(), c.Weights[0]
	for i := 1; i < len(c.Servers); i++ {
		o, w := c.Servers[i].Outstanding(), c.Weights[i]
		// o/w < bo/bw, without division.
		switch l, r := o*bw, bo*w; {
		case l < r:
			best, ties, bo, bw = i, 1, o, w
		case l == r:
			ties++
		}
	}
	if ties > 1 {
		// The counts may move under us; if no candidate is tied any more,
		// the best seen stands.
		if i := p.rr.pick(c, func(i int) bool { return c.Servers[i].Outstanding()*bw == bo*c.Weights[i] }); i >= 0 {
			best = i
		}
	}
	return c.Servers[best]
}

// SetServers implements ServerSetter.
func (p *LeastRequest) SetServers(all []*Server) { p.rr.SetServers(all) }

// P2C is the power of two choices: it draws two distinct candidates
// uniformly at random and takes the one with the lower cost
//
//	cost = latency × (outstanding + 1) / effective weight
//
// where latency is the server's peak-sensitive latency estimate (see
// Server.Latency: it jumps up with a slow try, comes down gradually with
// faster ones, and decays towards zero while the server gets no traffic, so
// a server that was slow is probed again later). A server with no estimate costs 0 while idle
// and +Inf while it has a try outstanding, so a new server takes one probe
// try at a time until its first report. Equal costs go to the candidate with
// fewer outstanding tries per weight, then to the first drawn. With equal
// weights and load the picks are uniform; heavier servers win more pairs, so
// weights shape the shares without fixing them.
//
// P2C takes no lock. It is the default policy.
type P2C struct{}

// Pick implements Policy.
func (P2C) Pick(c *Candidates, _ Request) *Server {
	n := uint64(len(c.Servers))
	if n == 1 {
		return c.Servers[0]
	}
	a := c.Uint64N(n)
	b := c.Uint64N(n - 1)
	if b >= a {
		b++
	}
	now := c.Now.UnixNano()
	ca, cb := p2cCost(c, int(a), now), p2cCost(c, int(b), now)
	if cb < ca || (cb == ca && c.Servers[b].Outstanding()*c.Weights[a] < c.Servers[a].Outstanding()*c.Weights[b]) {
		return c.Servers[b]
	}
	return c.Servers[a]
}

func p2cCost(c *Candidates, i int, now int64) float64 {
	s := c.Servers[i]
	out := s.Outstanding()
	lat := s.latencyAt(now)
	if lat == 0 {
		if out > 0 {
			return math.Inf(1)
		}
		return 0
	}
	return lat * float64(out+1) / float64(c.Weights[i])
}

// Random picks a candidate at random with probability proportional to its
// effective weight. It takes no lock.
type Random struct{}

// Pick implements Policy.
func (Random) Pick(c *Candidates, _ Request) *Server {
	var total int64
	for _, w := range c.Weights {
		total += w
	}
	r := int64(c.Uint64N(uint64(total)))
	for i, w := range c.Weights {
		if r < w {
			return c.Servers[i]
		}
		r -= w
	}
	return c.Servers[len(c.Servers)-1]
}

// First picks the first candidate in configured order: the servers are a
// priority list, and the next one takes over only when those before it are
// unavailable or already failed this request (HAProxy's and Caddy's first).
type First struct{}

// Pick implements Policy.
func (First) Pick(c *Candidates, _ Request) *Server { return c.Servers[0] }

// DefaultPolicy is the name of the policy new configurations get.
const DefaultPolicy = "p2c"

// policies maps the configuration names of the policies to constructors.
var policies = map[string]func() Policy{
	"round_robin":   func() Policy { return new(RoundRobin) },
	"least_request": func() Policy { return new(LeastRequest) },
	"p2c":           func() Policy { return P2C{} },
	"random":        func() Policy { return Random{} },
	"first":         func() Policy { return First{} },
	"hash":          func() Policy { return new(Hash) },
}

// ErrUnknownPolicy is returned (wrapped) by ParsePolicy for a name it does
// not know.
var ErrUnknownPolicy = errors.New("unknown load-balancing policy")

// ParsePolicy returns a constructor for the policy a configuration names:
// round_robin, least_request, p2c, random, first or hash. Each Group needs a
// Policy of its own: call the constructor once per group.
func ParsePolicy(name string) (func() Policy, error) {
	if f, ok := policies[name]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("balance: %w %q (want one of %s)", ErrUnknownPolicy, name, strings.Join(PolicyNames(), ", "))
}

// PolicyNames returns the configuration names of the policies, sorted.
func PolicyNames() []string {
	names := make([]string, 0, len(policies))
	for n := range policies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
