package main

import (
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/admin"
	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/observe"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/upgrade"
)

// adminSocket is the name the admin listener's socket is handed over
// under in an upgrade.
const adminSocket = "admin "

// loaded names the config running: the SHA-256 of its file, and when it
// was read.
type loaded struct {
	hash string
	at   time.Time
}

// current is the proxy server accepting on the sockets now, for the
// metrics and the admin listener, which outlive the servers a reload
// replaces: what they read of it follows the replacement.
type current struct{ p atomic.Pointer[proxy.Server] }

func (c *current) Draining() bool  { return c.p.Load().Draining() }
func (c *current) InFlight() int64 { return c.p.Load().InFlight() }
func (c *current) Connections(report func(listener, protocol string)) {
	c.p.Load().Connections(report)
}

// startAdmin starts the admin listener cfg asks for, on the socket
// inherited from an upgrade's old process when there is one (in).
func (r *running) startAdmin(cfg *config.Config, l loaded, in *upgrade.Inherited) error {
	ln, err := listen(cfg.Admin.Address, cfg.Admin.Mode, in, adminSocket, listenTCP)
	if err != nil {
		return err
	}
	r.serveAdmin(cfg.Admin, l, ln)
	return nil
}

// serveAdmin serves the admin API and status page on ln, with a recorder
// of the tries from now on. The metrics must exist (ensureMetrics).
func (r *running) serveAdmin(c config.Admin, l loaded, ln net.Listener) {
	r.recorder = observe.NewRecorder()
	r.metrics.Record(r.recorder)
	r.admin = &admin.Server{
		Generation: r.gen.Load, Proxy: &r.current, Pool: r.pool, Metrics: r.metrics, Recorder: r.recorder,
		Pprof: c.Pprof, Log: r.log,
	}
	r.admin.SetConfig(l.hash, l.at)
	r.admin.SetToken(r.gen.Load().AdminToken)
	r.adminCfg, r.adminLn, r.adminStop = c, ln, r.admin.Serve(ln)
	logAdmin(r.log, ln.Addr(), c)
}

// stopAdmin closes the admin listener, and the recorder stops recording.
func (r *running) stopAdmin() {
	r.admin.SetListening(false)
	r.adminStop()
	r.metrics.Record(nil)
	r.admin, r.recorder, r.adminCfg, r.adminLn, r.adminStop = nil, nil, config.Admin{}, nil, nil
	r.log.Info("admin listener closed")
}

// reloaded tells the metrics and the admin listener how a reload went: on
// success, the new config's hash and generation (the recorder forgets the
// servers it no longer has).
func (r *running) reloaded(err error, hash string, gen *config.Generation) {
	now := time.Now()
	if r.metrics != nil {
		r.metrics.Reloaded(err)
		if err == nil {
			r.metrics.ConfigLoaded(hash, now)
		}
	}
	if err != nil || r.admin == nil {
		return
	}
	r.admin.SetConfig(hash, now)
	r.admin.SetToken(gen.AdminToken)
	keep := map[[2]string]bool{}
	gen.Servers(func(upstream string, s *balance.Server) { keep[[2]string{upstream, s.Addr}] = true })
	r.recorder.Retain(func(upstream, addr string) bool { return keep[[2]string{upstream, addr}] })
}

// moveAdmin applies a reloaded admin section: the listener opens on ln,
// bound by the reload, when there was none; closes when c has no address;
// moves to a new address (the old one closes once the new one is open; if
// it cannot be opened, the old one stays), or reopens on its address when
// only pprof changed.
func (r *running) moveAdmin(c config.Admin, l loaded, ln net.Listener) {
	switch {
	case r.admin == nil && ln != nil:
		r.serveAdmin(c, l, ln)
		r.admin.SetListening(true)
		return
	case r.admin == nil:
		return
	case c.Address == "":
		r.stopAdmin()
		return
	}
	if c.Address == r.adminCfg.Address && c.Pprof == r.adminCfg.Pprof {
		if path, unix := sock.UnixPath(c.Address); unix && c.Mode != r.adminCfg.Mode {
			if err := os.Chmod(path, c.Mode.Perm()); err != nil {
				r.log.Error("reload: the admin listener's socket keeps its mode", "address", c.Address, "error", err)
				c.Mode = r.adminCfg.Mode
			}
		}
		r.adminCfg = c // the token is the admin server's (reloaded)
		return
	}
	if c.Address == r.adminCfg.Address {
		r.adminStop() // the address must be free again
	}
	r.admin.Pprof = c.Pprof
	ln, err := listen(c.Address, c.Mode, nil, "", listenTCP)
	if err != nil {
		r.admin.Pprof = r.adminCfg.Pprof
		if c.Address == r.adminCfg.Address {
			r.log.Error("reload: reopening the admin listener failed; it is closed until a reload or restart opens it", "address", c.Address, "error", err)
			r.adminStop, r.adminCfg, r.adminLn = func() {}, config.Admin{}, nil
			return
		}
		r.log.Error("reload: the admin listener stays where it was", "address", r.adminCfg.Address, "new_address", c.Address, "error", err)
		return
	}
	if c.Address != r.adminCfg.Address {
		r.adminStop()
	}
	r.adminCfg, r.adminLn, r.adminStop = c, ln, r.admin.Serve(ln)
	logAdmin(r.log, ln.Addr(), c)
}
