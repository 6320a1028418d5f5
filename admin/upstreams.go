package admin

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/observe"
)

// Upstreams is what /api/upstreams answers.
type Upstreams struct {
	Time time.Time `json:"time"`
	// Config identifies the config running: the SHA-256 of its file and
	// when it was loaded.
	Config ConfigInfo `json:"config"`
	// WindowSeconds is the span of the rates and percentiles.
	WindowSeconds float64 `json:"window_seconds"`
	// Connections counts the open client connections by listener and
	// protocol; InFlight the requests under way.
	Connections []Connections `json:"connections"`
	InFlight    int64         `json:"requests_in_flight"`
	Upstreams   []Upstream    `json:"upstreams"`
	// Caches are the cache stores, with their hit ratios.
	Caches []CacheStore `json:"caches"`
}

// ConfigInfo identifies a config.
type ConfigInfo struct {
	Hash     string    `json:"hash"`
	LoadedAt time.Time `json:"loaded_at"`
}

// Connections is the number of open client connections of one listener
// and protocol.
type Connections struct {
	Listener string `json:"listener"`
	Protocol string `json:"protocol"`
	Open     int    `json:"open"`
}

// Upstream is one upstream and its servers.
type Upstream struct {
	Name string `json:"name"`
	// Routed is set when a route sends requests to it (only those count
	// for /ready).
	Routed  bool          `json:"routed"`
	Policy  string        `json:"policy"`
	Servers []ServerState `json:"servers"`
	// The servers' rates and tries summed.
	TriesPerSecond    float64 `json:"tries_per_second"`
	FailuresPerSecond float64 `json:"failures_per_second"`
	RetriesPerSecond  float64 `json:"retries_per_second"`
	Available         int     `json:"available"` // servers healthy and not drained
}

// ServerState is one server of an upstream.
type ServerState struct {
	// Address is the server's address as written in the config (a DNS
	// name's, for each address it resolved to); it names the server in
	// drain and enable. Resolved is the address dialed.
	Address  string `json:"address"`
	Resolved string `json:"resolved"`
	Backup   bool   `json:"backup"`
	Weight   int    `json:"weight"`
	// Healthy is the server's own health (passive and active checks);
	// State says why, as the logs do. Condition, Until and Reason are the
	// same in parts (balance.Health): "healthy", "slow_start",
	// "unhealthy", "down" or "ejected"; for down and ejected, when it
	// takes requests again (absent otherwise); why. Drained is set while
	// it is taken out by hand.
	Healthy   bool      `json:"healthy"`
	State     string    `json:"state"`
	Condition string    `json:"condition"`
	Until     time.Time `json:"until,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	Drained   bool      `json:"drained"`
	// Ejections is the ejection multiplier (see balance.Server.Ejections).
	Ejections int `json:"ejections"`
	// Outstanding counts the tries in flight to it.
	Outstanding int64 `json:"outstanding"`
	// LatencyEstimateMS is the balancer's latency estimate (a decaying
	// peak EWMA), in milliseconds.
	LatencyEstimateMS float64 `json:"latency_estimate_ms"`
	Pool              Pool    `json:"pool"`
	observe.Snapshot
}

// Pool is a server's connections: idle in the pool, active with a try.
type Pool struct {
	Idle   int   `json:"idle"`
	Active int64 `json:"active"`
}

// Snapshot returns the state of every upstream server now.
func (a *Server) Snapshot() Upstreams {
	now := time.Now()
	hash, at := a.configInfo()
	out := Upstreams{Time: now.UTC(), Config: ConfigInfo{Hash: hash, LoadedAt: at.UTC()},
		WindowSeconds: observe.Window.Seconds(), Connections: []Connections{}, Upstreams: []Upstream{}, Caches: []CacheStore{}}
	if a.Proxy != nil {
		counts := map[[2]string]int{}
		a.Proxy.Connections(func(listener, protocol string) { counts[[2]string{listener, protocol}]++ })
		for k, n := range counts {
			out.Connections = append(out.Connections, Connections{Listener: k[0], Protocol: k[1], Open: n})
		}
		slices.SortFunc(out.Connections, func(x, y Connections) int {
			return cmp.Or(cmp.Compare(x.Listener, y.Listener), cmp.Compare(x.Protocol, y.Protocol))
		})
		out.InFlight = a.Proxy.InFlight()
	}
	gen := a.generation()
	if gen == nil {
		return out
	}
	out.Caches = cacheStores(gen)
	idle := map[string]int{}
	if a.Pool != nil {
		a.Pool.IdleByKey(func(key string, n int) {
			// A key is the server's address, then for TLS and HTTP/2
			// what else sets its connections apart after a "|".
			addr, _, _ := strings.Cut(key, "|")
			idle[addr] += n
		})
	}
	routed := routedUpstreams(gen)
	for _, u := range gen.Config.Upstreams {
		g := gen.Upstreams[u.Name]
		if g == nil {
			continue
		}
		up := Upstream{Name: u.Name, Routed: routed[u.Name], Policy: cmp.Or(u.Balance, "p2c"), Servers: []ServerState{}}
		for _, s := range g.Balancer().Servers() {
			sv := ServerState{
				Address: s.Name, Resolved: s.Addr, Backup: s.Backup, Weight: max(s.Weight, 1),
				Healthy: s.Healthy(), State: s.State(), Drained: s.Drained(), Ejections: s.Ejections(),
				Outstanding:       s.Outstanding(),
				LatencyEstimateMS: float64(s.Latency()) / float64(time.Millisecond),
				Pool:              Pool{Idle: idle[s.Addr], Active: s.Outstanding()},
			}
			h := s.Health()
			sv.Condition, sv.Reason = string(h.Condition), h.Reason
			if !h.Until.IsZero() {
				sv.Until = h.Until.UTC()
			}
			sv.Snapshot = a.stats(u.Name, s.Addr, now)
			if sv.Healthy && !sv.Drained {
				up.Available++
			}
			up.TriesPerSecond += sv.TriesPerSecond
			up.FailuresPerSecond += sv.FailuresPerSecond
			up.RetriesPerSecond += sv.RetriesPerSecond
			up.Servers = append(up.Servers, sv)
		}
		out.Upstreams = append(out.Upstreams, up)
	}
	return out
}

// stats returns the Recorder's statistics of a server, or empty ones.
func (a *Server) stats(upstream, addr string, now time.Time) observe.Snapshot {
	if a.Recorder == nil {
		return observe.Snapshot{Reasons: map[string]uint64{}, Recent: []observe.TryError{}}
	}
	return a.Recorder.Snapshot(a.Recorder.Server(upstream, addr), now)
}

func (a *Server) upstreams(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.Snapshot())
}

// routedUpstreams returns the names of the upstreams a route sends to.
func routedUpstreams(gen *config.Generation) map[string]bool {
	routed := map[string]bool{}
	for _, r := range gen.Config.Routes {
		routed[r.Upstream] = true
	}
	return routed
}

// upstreamsNotReady says, for each routed upstream with no server that
// takes requests, why.
func upstreamsNotReady(gen *config.Generation) []string {
	var reasons []string
	routed := routedUpstreams(gen)
next:
	for _, u := range gen.Config.Upstreams {
		g := gen.Upstreams[u.Name]
		if !routed[u.Name] || g == nil {
			continue
		}
		servers := g.Balancer().Servers()
		if len(servers) == 0 {
			reasons = append(reasons, fmt.Sprintf("upstream %s: no server (no address resolved yet)", u.Name))
			continue
		}
		var drained, down int
		for _, s := range servers {
			switch {
			case s.Drained():
				drained++
			case !s.Healthy():
				down++
			default:
				continue next
			}
		}
		reasons = append(reasons, fmt.Sprintf("upstream %s: no server takes requests (%d unhealthy, %d drained)", u.Name, down, drained))
	}
	return reasons
}

// serverAction drains or enables a server: POST
// /api/upstreams/{upstream}/servers/{server}/{drain|enable}.
func (a *Server) serverAction(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if action != "drain" && action != "enable" {
		writeError(w, http.StatusNotFound, "no such action "+fmt.Sprintf("%q", action)+"; want drain or enable")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, action+" takes POST, not "+r.Method)
		return
	}
	name, addr := r.PathValue("upstream"), r.PathValue("server")
	gen := a.generation()
	if gen == nil {
		writeError(w, http.StatusServiceUnavailable, "no config loaded")
		return
	}
	g := gen.Upstreams[name]
	if g == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no upstream named %q", name))
		return
	}
	b := g.Balancer()
	var ok bool
	if action == "drain" {
		ok = b.Drain(addr)
	} else {
		ok = b.Enable(addr)
	}
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("upstream %s has no server %q (the address as written in the config)", name, addr))
		return
	}
	msg := "admin: server drained"
	if action == "enable" {
		msg = "admin: server enabled"
	}
	a.log().Info(msg, "upstream", name, "server", addr, "client", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"upstream": name, "server": addr, "drained": action == "drain", "servers": serverStates(b, addr)})
}

// serverStates lists the states of the servers configured as addr.
func serverStates(b *balance.Group, addr string) []map[string]any {
	var out []map[string]any
	for _, s := range b.Servers() {
		if s.Name == addr {
			out = append(out, map[string]any{"resolved": s.Addr, "drained": s.Drained(), "healthy": s.Healthy(), "outstanding": s.Outstanding()})
		}
	}
	return out
}
