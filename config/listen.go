package config

import (
	"fmt"
	"net"
	"strings"

	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/tlsterm"
)

// Listeners are the running form of a config's listeners: how each is
// served (Options), and for each TLS listener the tlsterm.Switch whose
// settings a reload replaces (Reload), so that new handshakes get the
// certificates read again while the listener, its open connections and
// its session ticket keys stay.
type Listeners struct {
	list     []Listener
	switches []*tlsterm.Switch // for each listener; nil for a plain one
}

// NewListeners readies the listeners of cfg, whose Generation g holds their
// TLS settings.
func NewListeners(cfg *Config, g *Generation) (*Listeners, error) {
	ls := &Listeners{list: cfg.Listen, switches: make([]*tlsterm.Switch, len(cfg.Listen))}
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
// TLS listener).
func (ls *Listeners) Options(i int, bound []net.Addr) proxy.ListenerOptions {
	var o proxy.ListenerOptions
	if sw := ls.switches[i]; sw != nil {
		o.TLS = sw.Config()
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
