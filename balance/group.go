package balance

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/internal/sock"
)

// ErrNoServer is the error Pick returns (as a *NoServerError) when the group
// has no server at all: none configured, or no address resolved yet for its
// DNS names. A group that has servers never refuses, even when all are
// down.
var ErrNoServer = errors.New("no upstream server")

// NoServerError says why a group had no server to pick. It matches
// ErrNoServer with errors.Is.
type NoServerError struct {
	Upstream string
	Reason   string
}

func (e *NoServerError) Error() string {
	return "balance: upstream " + e.Upstream + ": no server: " + e.Reason
}

// Is reports whether target is ErrNoServer.
func (e *NoServerError) Is(target error) bool { return target == ErrNoServer }

// ErrAllExcluded is the error Pick returns when every server of the group
// is one the request must not go to again (Tries.Excluded).
var ErrAllExcluded = errors.New("every server is ruled out for this request")

// Tries reports what the request being served has been through: the
// servers it already tried and failed on, and those it must not go to again
// (it timed out there after it was sent, and the server may still be working
// on it; or the server's TLS certificate did not verify). The proxy's
// session implements it.
type Tries interface {
	Tried(addr string) bool
	Excluded(addr string) bool
}

// Request is what server selection needs to know about one try of a
// request. Passing it does not allocate.
type Request struct {
	// Tries reports the servers this request already failed on; nil means
	// none (a first try).
	Tries Tries
	// HashKey is the key the Hash policy hashes (see HashKey for extracting
	// it); other policies ignore it. Empty means no key.
	HashKey []byte
}

func (r *Request) tried(s *Server) bool {
	return r.Tries != nil && r.Tries.Tried(s.Addr)
}

func (r *Request) excluded(s *Server) bool {
	return r.Tries != nil && r.Tries.Excluded(s.Addr)
}

// Group is the servers of one upstream with its selection policy and health
// settings. Pick chooses a server for each try of a request, Report feeds
// back how the try went, and Start runs the background work (active checks,
// DNS re-resolution) until Close.
//
// A Group is safe for concurrent use. Pick loads an atomic snapshot of the
// server list and takes no group-wide lock (RoundRobin and LeastRequest
// serialize their own short pick; P2C, Random, First and Hash with a key take
// no lock at all) and does not allocate.
type Group struct {
	name   string
	policy Policy
	opts   Options
	// defaultClock is set when opts.Now is internal/clock's, which a
	// Result's End is read from.
	defaultClock bool
	statuses     [10]uint64 // bit set of Options.Statuses below 640

	members atomic.Pointer[members]
	ejectMu sync.Mutex // one ejection decision at a time (see eject)

	mu      sync.Mutex // guards the following
	entries []entry    // the configured servers, in order
	started bool
	closed  bool
	ctx     context.Context
	cancel  context.CancelFunc
	checks  map[*Server]context.CancelFunc // running active checks
	drained map[string]bool                // configured names taken out by hand (Drain)
	wg      sync.WaitGroup                 // every goroutine started
}

// members is one immutable snapshot of the group's servers.
type members struct {
	all, primaries, backups []*Server
	why                     string // why all is empty
}

// entry is one configured server: an address, or a DNS name standing for
// the servers it resolves to.
type entry struct {
	static *Server
	name   *dnsName
}

// NewGroup returns a group named name (for logs and errors) of servers,
// choosing with policy (nil means P2C) under opts. It takes ownership of the
// servers; one that already belongs to another group is copied (its
// configuration only).
//
// A server is an address to dial when the host of its Addr (its Name when
// Addr is empty) is an IP literal, when it is a Unix socket's "unix:PATH",
// or when it has no host:port form (dialing will say what is wrong). Otherwise it is a DNS name: the group
// resolves it into one server per address, each with the name's Weight and
// Backup, when Start or Resolve runs, and again every ResolveInterval; until
// the first answer the name contributes no server. The policy's
// SetServers, if it has one, is called before NewGroup returns.
func NewGroup(name string, servers []*Server, policy Policy, opts Options) *Group {
	if policy == nil {
		policy = P2C{}
	}
	g := &Group{name: name, policy: policy, opts: opts.withDefaults(), defaultClock: opts.Now == nil}
	for _, st := range g.opts.Statuses {
		if st >= 0 && st < len(g.statuses)*64 {
			g.statuses[st/64] |= 1 << (st % 64)
		}
	}
	for _, s := range servers {
		if s.g != nil {
			s = s.clone()
		}
		if s.Addr == "" {
			s.Addr = s.Name
		}
		if s.Name == "" {
			s.Name = s.Addr
		}
		if _, unix := sock.UnixPath(s.Addr); unix {
			// A Unix socket's path: nothing to resolve.
		} else if host, port, err := net.SplitHostPort(s.Addr); err == nil {
			if _, err := netip.ParseAddr(host); err != nil {
				g.entries = append(g.entries, entry{name: &dnsName{proto: s, host: host, port: port}})
				continue
			}
		}
		s.g = g
		g.entries = append(g.entries, entry{static: s})
	}
	g.mu.Lock()
	g.publish()
	g.mu.Unlock()
	return g
}

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// Servers returns the group's current servers, in configured order (a DNS
// name's servers in address order). The slice is the caller's.
func (g *Group) Servers() []*Server {
	return append([]*Server(nil), g.members.Load().all...)
}

// Pick chooses the server for one try of req. The rules, the same for
// every policy, are applied in order, and the policy chooses among the
// first non-empty set of candidates:
//
//  1. available primaries this request has not tried;
//  2. available backups this request has not tried;
//  3. available primaries, tried or not (every available server already
//     failed this request: try one again, as nginx does with a
//     single-server upstream), then available backups likewise;
//  4. panic mode, when no server is available (all down or ejected): every
//     primary (every backup if there are none) as if healthy, untried
//     ones first. Health that condemns every server is more likely wrong
//     than the servers, and a try beats a certain error.
//
// Available means not down by max_fails, not ejected and not failing its
// active checks. No rule offers a server the request excludes.
//
// A server taken out passively whose probe is due (half its down time or
// ejection has passed, see Options.NoProbe) is the exception: when rule 1
// (for a backup, rule 2) comes to it, no try is in flight to it, and the
// request has neither tried nor excluded it, Pick claims the probe and
// returns that server at once, without asking the policy. The probe goes
// past the policy because a policy might never choose it (First prefers
// the servers before it, Hash takes it only for the keys it owns), and one
// try does not upset any policy's balance. Backups are probed only when no
// primary is available, as they are used. Of concurrent Picks, one claims
// the probe; the others go on with the rules.
//
// The chosen server's outstanding count goes up by one until the matching
// Report. Pick fails, with a *NoServerError matching ErrNoServer, when the
// group has no server at all, and with ErrAllExcluded when the request
// excludes every server.
func (g *Group) Pick(req Request) (*Server, error) {
	m := g.members.Load()
	if len(m.all) == 0 {
		return nil, &NoServerError{Upstream: g.name, Reason: m.why}
	}
	t := g.opts.Now()
	now := t.UnixNano()
	c := candidatesPool.Get().(*Candidates)
	c.Now, c.Rand = t, g.opts.Rand
	s := g.candidates(c, m, &req, now) // a probe, counted already
	if s == nil && len(c.Servers) > 0 {
		s = g.policy.Pick(c, req)
		if s == nil {
			s = c.Servers[0] // a broken Policy; the first candidate is still right
		}
		s.outstanding.Add(1)
	}
	c.reset()
	candidatesPool.Put(c)
	if s == nil {
		if m.allDrained() {
			return nil, &NoServerError{Upstream: g.name, Reason: "every server is drained"}
		}
		return nil, ErrAllExcluded
	}
	return s, nil
}

// allDrained reports whether every server of the snapshot is drained.
func (m *members) allDrained() bool {
	for _, s := range m.all {
		if !s.drained.Load() {
			return false
		}
	}
	return true
}

// candidates fills c with the first non-empty candidate set of Pick's
// rules, or returns the server whose probe it claimed on the way (its try
// counted as outstanding), leaving c as it stands.
func (g *Group) candidates(c *Candidates, m *members, req *Request, now int64) *Server {
	const (
		available = 1 << iota
		untried
	)
	tiers := [2][]*Server{m.primaries, m.backups}
	steps := [...]struct {
		tier int
		need int
	}{
		{0, available | untried},
		{1, available | untried},
		{0, available},
		{1, available},
	}
	for _, st := range steps {
		for _, s := range tiers[st.tier] {
			if s.drained.Load() {
				continue
			}
			if st.need&available != 0 && !g.available(s, now) {
				if st.need&untried != 0 && s.probeDue(now) && !req.excluded(s) && !req.tried(s) && s.takeProbe(now) {
					return s
				}
				continue
			}
			if req.excluded(s) {
				continue
			}
			if st.need&untried != 0 && req.tried(s) {
				continue
			}
			c.add(s, s.effectiveWeight(now, g.opts.SlowStart))
		}
		if len(c.Servers) > 0 {
			return nil
		}
	}
	// Panic mode.
	all := m.primaries
	if len(all) == 0 {
		all = m.backups
	}
	for _, s := range all {
		if !req.tried(s) && !req.excluded(s) && !s.drained.Load() {
			c.add(s, s.effectiveWeight(now, g.opts.SlowStart))
		}
	}
	if len(c.Servers) == 0 {
		for _, s := range all {
			if !req.excluded(s) && !s.drained.Load() {
				c.add(s, s.effectiveWeight(now, g.opts.SlowStart))
			}
		}
	}
	return nil
}

// available reports whether s may take requests at now, announcing its
// return to health if that is news.
func (g *Group) available(s *Server, now int64) bool {
	if !s.availableAt(now) {
		return false
	}
	if s.announcedDown.Load() {
		g.noteHealth(s, now, "down time over")
	}
	return true
}

// publish rebuilds the server snapshot from the entries, hands it to the
// policy, and starts and stops active checks to match. g.mu is held.
func (g *Group) publish() {
	m := &members{}
	for _, e := range g.entries {
		if e.static != nil {
			m.all = append(m.all, e.static)
			continue
		}
		m.all = append(m.all, e.name.servers...)
		if len(e.name.servers) == 0 && m.why == "" {
			m.why = e.name.why()
		}
	}
	for _, s := range m.all {
		// A server a DNS name gained, or a reload carried over, is
		// drained as its configured name is.
		s.drained.Store(g.drained[s.Name])
		if s.Backup {
			m.backups = append(m.backups, s)
		} else {
			m.primaries = append(m.primaries, s)
		}
	}
	if len(g.entries) == 0 {
		m.why = "no servers configured"
	}
	if ss, ok := g.policy.(ServerSetter); ok {
		ss.SetServers(m.all)
	}
	g.members.Store(m)
	g.syncChecks(m.all)
}

// Start starts the group's background work under ctx: the lookups of its
// DNS names (at once for names with no address yet, then every
// ResolveInterval), active health checks when Options.Active is set, and a
// once-a-second sweep that announces servers whose down time ended. It does
// not wait for DNS answers; use Resolve for that. Calling Start again, or
// after Close, does nothing. Cancelling ctx stops the work too, but only
// Close waits for it.
func (g *Group) Start(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started || g.closed {
		return
	}
	g.started = true
	g.ctx, g.cancel = context.WithCancel(ctx)
	for _, e := range g.entries {
		if e.name != nil {
			g.wg.Add(1)
			go g.resolveLoop(g.ctx, e.name)
		}
	}
	g.syncChecks(g.members.Load().all)
	g.wg.Add(1)
	go g.sweep(g.ctx)
}

// Close stops every goroutine the group started and waits for them to
// return. The group still picks afterwards, from the servers it last had.
// Close may be called more than once, and without Start.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	if g.cancel != nil {
		g.cancel()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// running reports whether background work may be started. g.mu is held.
func (g *Group) running() bool {
	return g.started && !g.closed && g.ctx.Err() == nil
}

// sweep announces, once a second, servers whose down time has ended without
// a Pick looking at them (backups, idle groups).
func (g *Group) sweep(ctx context.Context) {
	defer g.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := g.opts.Now().UnixNano()
		for _, s := range g.members.Load().all {
			if s.announcedDown.Load() {
				g.noteHealth(s, now, "down time over")
			}
		}
	}
}

// Drain takes the servers configured as name (the address as written in
// the configuration: Server.Name) out by hand, as HAProxy's "set server
// state drain" does: Pick offers them to no new try, by any rule, panic
// mode included, while tries in flight finish. Their health goes on being
// tracked. A group whose every server is drained fails Pick with a
// *NoServerError. The state lasts until Enable, and Carry hands it to the
// next generation's servers of the same name. Drain reports false, and
// changes nothing, when the group has no server configured as name.
func (g *Group) Drain(name string) bool {
	return g.mark(name, true)
}

// Enable undoes Drain for the servers configured as name. It reports
// false when the group has no server configured as name.
func (g *Group) Enable(name string) bool {
	return g.mark(name, false)
}

func (g *Group) mark(name string, drained bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.hasName(name) {
		return false
	}
	g.setDrained(name, drained)
	g.publish()
	return true
}

// hasName reports whether a server of g is configured as name. g.mu is
// held.
func (g *Group) hasName(name string) bool {
	for _, e := range g.entries {
		if e.static != nil && e.static.Name == name || e.name != nil && e.name.proto.Name == name {
			return true
		}
	}
	return false
}

// setDrained records whether the servers configured as name are drained;
// publish applies it. g.mu is held.
func (g *Group) setDrained(name string, drained bool) {
	if !drained {
		delete(g.drained, name)
		return
	}
	if g.drained == nil {
		g.drained = make(map[string]bool)
	}
	g.drained[name] = true
}

// Carry takes over the health state of old's servers for g's servers with
// the same Addr: passive failure counts and down times, ejections, active
// check state, latency estimate and slow-start ramp, and whether it is
// drained (see Drain) for the configured names g still has. A DNS name of g also
// takes over the addresses old resolved for the same Name (with g's Weight
// and Backup), so the new generation has servers from its first Pick
// instead of waiting for a lookup. Servers of g that old did not have count
// as added: with SlowStart, they ramp up from now.
//
// It is for config reloads: call it after NewGroup and before g is used or
// started. old may go on serving meanwhile; changes to it after Carry are
// not carried.
func (g *Group) Carry(old *Group) {
	if old == nil {
		return
	}
	prev := make(map[string]*Server)
	for _, s := range old.members.Load().all {
		prev[s.Addr] = s
	}
	old.mu.Lock()
	drained := make([]string, 0, len(old.drained))
	for name := range old.drained {
		drained = append(drained, name)
	}
	old.mu.Unlock()
	now := g.opts.Now().UnixNano()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, name := range drained {
		if g.hasName(name) {
			g.setDrained(name, true)
		}
	}
	for _, e := range g.entries {
		if e.name != nil {
			e.name.carry(g, old, prev)
			continue
		}
		if o := prev[e.static.Addr]; o != nil {
			e.static.carryFrom(o)
		} else {
			e.static.rampFrom.Store(now)
		}
	}
	g.publish()
}
