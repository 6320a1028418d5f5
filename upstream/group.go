package upstream

import (
	"crypto/tls"
	"sync"

	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/proxy"
)

// Group is one upstream: its servers behind a balance.Group, with the
// connection and retry options their peers share. Each server is handed out
// as one proxy.Peer, the same for as long as the group serves, so picking
// allocates nothing after a server's first pick; the peer's Tag reports each
// try back to the balancer (it is a proxy.TryDone).
//
// A Group is a route.Picker, and by itself a proxy.Handler for a proxy of
// one upstream. It is safe for concurrent use.
type Group struct {
	name     string
	options  *proxy.PeerOptions
	balancer *balance.Group
	hashKey  balance.HashKey
	members  sync.Map // *balance.Server -> *member
}

// New returns the upstream named name (in logs, metrics and errors) of
// servers, choosing among them with policy (nil means balance.P2C) under
// the health settings opts, as balance.NewGroup does, which takes ownership
// of the servers. peer holds the connection and retry options of every
// peer; it is shared, not copied, and nil means proxy's defaults.
//
// When peer makes connections TLS and opts has active HTTP checks that set
// no TLS of their own, the checks run over TLS with peer's config.
//
// The group picks at once; its background work (active checks, DNS
// re-resolution) runs from Balancer().Start until Balancer().Close.
func New(name string, servers []*balance.Server, policy balance.Policy, opts balance.Options, peer *proxy.PeerOptions) *Group {
	if peer != nil && peer.TLS != nil && opts.Active != nil && opts.Active.TLS == nil {
		a := *opts.Active
		a.TLS = peer.TLS.Config
		if a.TLS == nil {
			a.TLS = &tls.Config{}
		}
		opts.Active = &a
	}
	return &Group{
		name:     name,
		options:  peer,
		balancer: balance.NewGroup(name, servers, policy, opts),
	}
}

// SetHashKey makes Pick take key from each request (the client's address, a
// header, a cookie or the target) for the policy to hash on: balance.Hash
// does, other policies ignore it. The zero key, the default, takes nothing.
// Call it before the group serves.
func (u *Group) SetHashKey(key balance.HashKey) { u.hashKey = key }

// Balancer returns the balance.Group behind u: to Start and Close its
// background work, to Carry health state over a reload, and to read its
// Servers and their health.
func (u *Group) Balancer() *balance.Group { return u.balancer }

// member ties a balanced server to the proxy peer that stands for it; it
// is the peer's Tag and reports each try back to the group.
type member struct {
	group  *balance.Group
	server *balance.Server
	peer   proxy.Peer
}

// TryDone reports the outcome of a try on the member's server to its group
// (passive health and latency).
func (m *member) TryDone(_ *proxy.Session, a *proxy.Attempt) {
	m.group.Report(m.server, Result(a))
}

// Pick asks the group for a server for this try: one that has not failed
// this request while one is left, healthy ones first. Every successful Pick
// must be followed by the try's report, which route.Table and the group's
// own TryDone make through the peer's Tag: the balancer counts the try as
// outstanding until then. A group with no server at all (none configured,
// or no DNS answer yet) gives a *fault.Error of kind NoUpstream (503).
func (u *Group) Pick(s *proxy.Session) (*proxy.Peer, error) {
	req := balance.Request{Tries: s}
	if u.hashKey != (balance.HashKey{}) {
		key := u.hashKey.Append(s.Scratch(), s.ClientIP, &s.Request)
		s.KeepScratch(key)
		req.HashKey = key
	}
	srv, err := u.balancer.Pick(req)
	if err != nil {
		return nil, &fault.Error{Kind: fault.NoUpstream, Source: fault.Internally,
			Context: "upstream " + u.name, Cause: err}
	}
	if m, ok := u.members.Load(srv); ok {
		return &m.(*member).peer, nil
	}
	m := &member{group: u.balancer, server: srv}
	m.peer = proxy.Peer{Addr: srv.Addr, ServerName: srv.Host(), Upstream: u.name, Options: u.options, Tag: m}
	actual, _ := u.members.LoadOrStore(srv, m)
	return &actual.(*member).peer, nil
}

// UpstreamPeer is Pick: with it a Group is a proxy.Handler, for a proxy
// whose every request goes to one upstream.
func (u *Group) UpstreamPeer(s *proxy.Session) (*proxy.Peer, error) { return u.Pick(s) }

// TryDone reports a try to the balancer of the group whose peer it went to
// (proxy.TryDone, called when the group is the proxy's Handler). A Handler
// of one's own that picks through Pick must pass its tries on here, or to
// the peer's Tag as route.Table does.
func (u *Group) TryDone(s *proxy.Session, a *proxy.Attempt) {
	if a.Peer == nil {
		return
	}
	if m, ok := a.Peer.Tag.(*member); ok {
		m.TryDone(s, a)
	}
}
