package balance

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// dnsName is a configured server whose host is a DNS name. Its fields other
// than proto, host and port are guarded by the group's mu.
type dnsName struct {
	proto      *Server // configuration: Name, Weight, Backup, ResolveInterval
	host, port string
	servers    []*Server // one per address of the last good answer, by address
	answered   bool      // a lookup succeeded (or addresses were carried)
	err        error     // the last lookup's error, nil after a success
}

// ResolveError is a failed lookup of a DNS-named server. The group keeps
// the addresses of the last good answer.
type ResolveError struct {
	Upstream string
	Name     string // the configured address, host:port
	Err      error
}

func (e *ResolveError) Error() string {
	return "balance: upstream " + e.Upstream + ": resolving " + e.Name + ": " + e.Err.Error()
}

func (e *ResolveError) Unwrap() error { return e.Err }

// errNoAddresses is a lookup that succeeded with an empty answer.
var errNoAddresses = errors.New("no addresses")

// lookupTimeout bounds one lookup.
const lookupTimeout = 5 * time.Second

// retryFirst is the wait before looking a name up again after a failed
// lookup; it doubles with each further failure, up to the name's interval.
const retryFirst = time.Second

func (n *dnsName) interval() time.Duration {
	if n.proto.ResolveInterval > 0 {
		return n.proto.ResolveInterval
	}
	return DefaultResolveInterval
}

// why says why the name contributes no server. g.mu is held.
func (n *dnsName) why() string {
	if n.err != nil {
		return "resolving " + n.proto.Name + ": " + n.err.Error()
	}
	return "no address resolved yet for " + n.proto.Name
}

// Resolve looks up every DNS name of the group now, one after another, and
// updates its servers. It returns the failures, as *ResolveError values
// joined with errors.Join; a name that fails keeps its last good addresses.
// It suits a startup that wants servers before serving; Start does not wait
// for lookups.
func (g *Group) Resolve(ctx context.Context) error {
	g.mu.Lock()
	var names []*dnsName
	for _, e := range g.entries {
		if e.name != nil {
			names = append(names, e.name)
		}
	}
	g.mu.Unlock()
	var errs []error
	for _, n := range names {
		if err := g.resolve(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// resolveLoop keeps n's servers up to date until ctx ends.
func (g *Group) resolveLoop(ctx context.Context, n *dnsName) {
	defer g.wg.Done()
	g.mu.Lock()
	delay := n.interval()
	if !n.answered {
		delay = 0
	}
	g.mu.Unlock()
	t := time.NewTimer(delay)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		delay = n.interval()
		if err := g.resolve(ctx, n); err != nil {
			if ctx.Err() != nil {
				return
			}
			delay = min(retryFirst<<min(failures, 16), delay)
			failures++
		} else {
			failures = 0
		}
		t.Reset(delay)
	}
}

// resolve looks n up once and applies the answer.
func (g *Group) resolve(ctx context.Context, n *dnsName) error {
	lctx, cancel := context.WithTimeout(ctx, min(lookupTimeout, n.interval()))
	addrs, err := g.opts.Resolver(lctx, n.host)
	cancel()
	if err == nil && len(addrs) == 0 {
		err = errNoAddresses
	}
	if err != nil && ctx.Err() != nil {
		return &ResolveError{Upstream: g.name, Name: n.proto.Name, Err: ctx.Err()} // stopping, not failing
	}
	if err != nil {
		g.mu.Lock()
		n.err = err
		g.publishIfEmpty(n)
		g.mu.Unlock()
		if g.opts.Log != nil {
			g.opts.Log.LogAttrs(ctx, slog.LevelWarn, "upstream name lookup failed; keeping the last addresses",
				slog.String("upstream", g.name), slog.String("name", n.proto.Name), slog.String("error", err.Error()))
		}
		return &ResolveError{Upstream: g.name, Name: n.proto.Name, Err: err}
	}
	g.apply(ctx, n, addrs)
	return nil
}

// publishIfEmpty republishes when n has no servers, so that Pick's error
// says why. g.mu is held.
func (g *Group) publishIfEmpty(n *dnsName) {
	if len(n.servers) == 0 {
		g.publish()
	}
}

// apply makes n's servers those of addrs: servers whose address stays are
// kept, with their state; new ones are created, and with SlowStart ramp up
// unless this is the name's first answer.
func (g *Group) apply(ctx context.Context, n *dnsName, addrs []netip.Addr) {
	want := make([]string, 0, len(addrs))
	for _, a := range addrs {
		want = append(want, joinHostPort(a.Unmap().String(), n.port))
	}
	slices.Sort(want)
	want = slices.Compact(want)

	g.mu.Lock()
	defer g.mu.Unlock()
	first := !n.answered
	n.answered, n.err = true, nil
	if slices.EqualFunc(n.servers, want, func(s *Server, a string) bool { return s.Addr == a }) {
		return
	}
	now := g.opts.Now().UnixNano()
	var next []*Server
	var added, removed []string
	for _, a := range want {
		i := slices.IndexFunc(n.servers, func(s *Server) bool { return s.Addr == a })
		if i >= 0 {
			next = append(next, n.servers[i])
			continue
		}
		s := n.proto.clone()
		s.Addr, s.g = a, g
		if !first {
			s.rampFrom.Store(now)
		}
		next = append(next, s)
		added = append(added, a)
	}
	for _, s := range n.servers {
		if !slices.Contains(want, s.Addr) {
			removed = append(removed, s.Addr)
		}
	}
	n.servers = next
	g.publish()
	if g.opts.Log != nil {
		g.opts.Log.LogAttrs(ctx, slog.LevelInfo, "upstream name resolved to new addresses",
			slog.String("upstream", g.name), slog.String("name", n.proto.Name),
			slog.String("added", strings.Join(added, " ")), slog.String("removed", strings.Join(removed, " ")))
	}
}

// joinHostPort joins an IP address's text and a port, bracketing IPv6.
func joinHostPort(host, port string) string {
	if strings.IndexByte(host, ':') >= 0 {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// carry takes over the servers old resolved for the same name, with their
// state (see Group.Carry). g.mu is held.
func (n *dnsName) carry(g, old *Group, prev map[string]*Server) {
	old.mu.Lock()
	var addrs []string
	for _, e := range old.entries {
		if e.name != nil && e.name.proto.Name == n.proto.Name {
			for _, s := range e.name.servers {
				addrs = append(addrs, s.Addr)
			}
			n.answered = n.answered || e.name.answered
		}
	}
	old.mu.Unlock()
	n.servers = n.servers[:0]
	for _, a := range addrs {
		s := n.proto.clone()
		s.Addr, s.g = a, g
		if o := prev[a]; o != nil {
			s.carryFrom(o)
		}
		n.servers = append(n.servers, s)
	}
}
