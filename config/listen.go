package config

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/acme"
	"github.com/sluice-proxy/sluice/h3"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/tlsterm"
)

// Listeners are the running form of a config's listeners: how each is
// served (Options), and for each TLS listener the tlsterm.Switch whose
// settings a reload replaces (Reload), so that new handshakes get the
// certificates read again while the listener, its open connections and
// its session ticket keys stay. A generation's ACME managers start once
// the listeners that answer their challenges are bound (StartACME).
type Listeners struct {
	list     []Listener
	switches []*tlsterm.Switch // for each listener; nil for a plain one
	h3       H3Limits
}

// NewListeners readies the listeners of cfg, whose Generation g holds their
// TLS settings.
func NewListeners(cfg *Config, g *Generation) (*Listeners, error) {
	ls := &Listeners{list: cfg.Listen, switches: make([]*tlsterm.Switch, len(cfg.Listen)), h3: cfg.Limits.H3}
	for i := range cfg.Listen {
		if i < len(g.TLS) && g.TLS[i] != nil {
			sw, err := tlsterm.NewSwitch(*g.TLS[i])
			if err != nil {
				return nil, fmt.Errorf("%s:%d: listen[%d].tls: %w", cfg.File, cfg.Listen[i].Line, i, err)
			}
			ls.switches[i] = sw
		}
	}
	return ls, nil
}

// Options returns how listener i is served. bound holds the address each
// listener is bound to: a redirect to https names the port of the first
// TLS listener as bound, unless https_port names one (443 when there is no
// TLS listener). Every plain listener answers the HTTP-01 challenges of
// the ACME managers (acme.HTTPChallenges), before its redirect or the
// routes: only those under way in this process, so that one without ACME
// serves as before.
func (ls *Listeners) Options(i int, bound []net.Addr) proxy.ListenerOptions {
	o := proxy.ListenerOptions{Protocols: ls.list[i].Protocols}
	if sw := ls.switches[i]; sw != nil {
		o.TLS = sw.Config()
		if ls.ServesH3(i) {
			// HTTP/3 is the UDP socket's; the TCP one offers the rest,
			// and says where HTTP/3 is (its port, as bound).
			o.Protocols = slices.DeleteFunc(slices.Clone(o.Protocols), func(p string) bool { return p == "h3" })
			if i < len(bound) {
				if ta, ok := bound[i].(*net.TCPAddr); ok {
					o.AltSvc = proxy.AltSvcH3(ta.Port)
				}
			}
		}
	} else {
		o.Filter = acme.HTTPChallenges{}
	}
	if l := ls.list[i]; l.RedirectHTTPS {
		port := l.HTTPSPort
		if port == 0 {
			port = 443
			for j, sw := range ls.switches {
				if sw == nil {
					continue
				}
				if j < len(bound) {
					if ta, ok := bound[j].(*net.TCPAddr); ok {
						port = ta.Port
					}
				}
				break
			}
		}
		o.Handler = &proxy.RedirectHTTPS{Port: port}
	}
	return o
}

// ServesH3 reports whether listener i serves HTTP/3 too (h3 in its
// protocols, on a listener with tls).
func (ls *Listeners) ServesH3(i int) bool {
	return ls.switches[i] != nil && slices.Contains(ls.list[i].Protocols, "h3")
}

// QUIC returns the options of listener i's HTTP/3 socket (ServesH3): its
// TLS (the listener's switch, so that a reload's certificates reach its
// handshakes too), early data, and limits.h3.
func (ls *Listeners) QUIC(i int) proxy.QUICOptions {
	return proxy.QUICOptions{
		TLS:       ls.switches[i].Config(),
		EarlyData: ls.list[i].EarlyData == "safe",
		H3: h3.Settings{
			MaxConcurrentStreams: ls.h3.MaxConcurrentStreams,
			MaxHeaderList:        int(ls.h3.MaxHeaderList),
			IdleTimeout:          ls.h3.IdleTimeout,
		},
	}
}

// acmeReadyWait bounds StartACME's wait for the certificates in storage.
const acmeReadyWait = 10 * time.Second

// StartACME starts the ACME managers of g not yet started (those a
// reload carried over are running), each until g's Close or the end of
// ctx, and waits until they serve the certificates they have in storage
// (acme.Manager.Ready), at most 10 s (loading one waits for its OCSP
// response when the stored one is stale; a warning names those still
// loading). bound holds the address each listener is bound to: a manager
// answers TLS-ALPN-01 on its first TLS listener that runs, and HTTP-01 on
// a plain listener bound to the same address but for its port
// (0.0.0.0:80 beside 0.0.0.0:443), when there is one; the CA validates
// with either. A manager none of whose listeners runs among ls (one for a
// listener a reload added, when ls are the running server's) is not
// started.
func (ls *Listeners) StartACME(ctx context.Context, g *Generation, bound []net.Addr) error {
	var started []*acme.Manager
	defer func() {
		wait, cancel := context.WithTimeout(ctx, acmeReadyWait)
		defer cancel()
		for _, m := range started {
			if m.Ready(wait) != nil {
				slog.Default().Warn("ACME certificates in storage not loaded yet; serving while they load",
					"domains", m.Domains(), "waited", acmeReadyWait)
			}
		}
	}()
	for _, s := range g.acme {
		if s.m == nil || s.started {
			continue
		}
		var ch acme.Challenges
		for _, j := range s.listeners {
			if i := ls.running(g.Config.Listen, j); i >= 0 && i < len(bound) && ls.switches[i] != nil {
				ch.TLSALPN = bound[i]
				break
			}
		}
		tlsAddr, ok := ch.TLSALPN.(*net.TCPAddr)
		if !ok {
			continue
		}
		for i, sw := range ls.switches {
			if sw != nil || i >= len(bound) {
				continue
			}
			if ta, ok := bound[i].(*net.TCPAddr); ok && ta.IP.Equal(tlsAddr.IP) {
				ch.HTTP = ta
				break
			}
		}
		if err := s.m.Start(ctx, ch); err != nil {
			return err
		}
		s.started = true
		started = append(started, s.m)
	}
	return nil
}

// running returns the index among the running listeners of listener j of
// the config next, matched by address (by place, for an address with
// port 0, as Reload matches them); -1 when none runs.
func (ls *Listeners) running(next []Listener, j int) int {
	addr := next[j].Address
	if j < len(ls.list) && ls.list[j].Address == addr {
		return j
	}
	if strings.HasSuffix(addr, ":0") {
		return -1
	}
	for i, l := range ls.list {
		if l.Address == addr {
			return i
		}
	}
	return -1
}

// Adopt makes TLS listener i take the switch of TLS listener k of old,
// the listeners a reload replaces, with listener i's settings in g (the
// Generation ls were made for): a new server on a socket the reload keeps
// goes on with the session ticket keys the old one served with, so that
// clients resume their sessions across the reload as across one that
// keeps the server. Either not being a TLS listener leaves listener i as
// it is. Call it once nothing of the reload can fail any more: the old
// server's new handshakes get the settings too.
func (ls *Listeners) Adopt(i int, old *Listeners, k int, g *Generation) {
	if i >= len(ls.switches) || k >= len(old.switches) || ls.switches[i] == nil || old.switches[k] == nil || i >= len(g.TLS) || g.TLS[i] == nil {
		return
	}
	if old.switches[k].Set(*g.TLS[i]) == nil {
		ls.switches[i] = old.switches[k]
	}
}

// Reload gives the TLS listeners that the reloaded config g.Config keeps
// (the same address, still with tls) the TLS settings of g, and returns
// their addresses. A listener whose address is listed more than once (port
// 0) is matched by its place in the list.
func (ls *Listeners) Reload(g *Generation) []string {
	var done []string
	next := g.Config.Listen
	for i, l := range ls.list {
		sw := ls.switches[i]
		if sw == nil {
			continue
		}
		j := -1
		if i < len(next) && next[i].Address == l.Address {
			j = i
		} else if !strings.HasSuffix(l.Address, ":0") {
			for k := range next {
				if next[k].Address == l.Address {
					j = k
					break
				}
			}
		}
		if j < 0 || j >= len(g.TLS) || g.TLS[j] == nil {
			continue
		}
		if sw.Set(*g.TLS[j]) == nil {
			done = append(done, l.Address)
		}
	}
	return done
}
