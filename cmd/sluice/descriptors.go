package main

import (
	"log/slog"

	"github.com/sluice-proxy/sluice/config"
)

// ownDescriptors is what sluice keeps open besides connections, rounded
// up: standard streams, listeners, log files, the pollers (Go's, the
// pool's idle watcher, the parker of idle clients), the metrics endpoint,
// the spare each listener holds for clients it must turn away, and the
// sockets of active health checks and DNS lookups.
const ownDescriptors = 64

// descriptorsNeeded is the least number of file descriptors cfg implies:
// the idle upstream connections the pool may hold (idle, the smaller of
// limits.max_idle_upstream_conns and the sum over upstreams of servers ×
// pool.max_idle), a client connection for each of them (a pooled
// connection was opened for a client, and clients keep theirs alive too),
// and ownDescriptors. Below it, sluice runs out of descriptors before its
// pool is full. It knows nothing of how many clients will come: each
// proxied request takes two descriptors, its client's and its upstream's.
func descriptorsNeeded(cfg *config.Config) (need, idle int) {
	if cfg.Limits.MaxIdleUpstreamConns > 0 {
		for _, u := range cfg.Upstreams {
			idle += len(u.Servers) * u.Pool.MaxIdle
		}
		idle = min(idle, cfg.Limits.MaxIdleUpstreamConns)
	}
	return ownDescriptors + 2*idle, idle
}

// logDescriptorLimit logs the process's limit on open files as sluice run
// starts (Go raises the soft limit to the hard one at start on Linux and
// macOS: this is the limit in force), and warns when it is below what cfg
// implies (descriptorsNeeded).
func logDescriptorLimit(log *slog.Logger, cfg *config.Config) {
	soft, hard, ok := descriptorLimit()
	if !ok {
		return
	}
	need, idle := descriptorsNeeded(cfg)
	// Each request in flight takes a client and an upstream connection.
	requests := (int64(soft) - ownDescriptors - int64(idle)) / 2
	log.Info("file descriptor limit", "soft", soft, "hard", hard,
		"pool_idle_max", idle, "requests_in_flight_max", max(requests, 0))
	if soft < uint64(need) {
		log.Warn("file descriptor limit below what the configuration implies; raise it (ulimit -n, systemd LimitNOFILE=)",
			"soft", soft, "needed", need)
	}
}
