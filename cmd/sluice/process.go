package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/admin"
	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/cache"
	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/idempotency"
	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/observe"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/ratelimit"
	"github.com/sluice-proxy/sluice/upgrade"
)

// upgradeTimeout bounds the wait for the new process of a binary upgrade
// to say it serves; past it, that process is killed and this one goes on.
const upgradeTimeout = 30 * time.Second

// metricsSocket is the name the metrics endpoint's socket is handed over
// under in an upgrade (listen addresses are host:port, never this).
const metricsSocket = "metrics "

// running is the proxy as sluice run serves it: the process's listening
// sockets, the server that accepts on them with the generation of routes
// and upstreams it serves, and the servers a reload replaced, which drain.
//
// A reload (SIGHUP) that changes only routes, upstreams and the TLS
// settings of listeners swaps them in the running server. One that
// changes anything the server holds (listeners, client timeouts, limits,
// logs, forwarding; config.ServerChanged) starts a new server on the
// sockets it keeps and the ones it binds, hands each kept socket over
// (the old server's accept loop ends, the new one's starts, clients wait
// in the socket's queue meanwhile), closes the sockets no longer listed,
// and drains the old server as SIGTERM would: its requests in flight
// finish, its idle connections close. Every server shares one upstream
// connection pool. A binary upgrade (SIGUSR2) hands every socket to a new
// process the same way (package upgrade).
//
// The fields are the signal loop's (serve): reloads and the end of an
// upgrade run on it, one at a time.
type running struct {
	path   string // the config file, absolute
	exe    string // the executable, as it was at start
	stderr io.Writer
	ctx    context.Context
	cancel context.CancelFunc // ends ctx, as the process stops
	log    *slog.Logger
	notify *notifier

	cfg       *config.Config // as last applied
	pool      *pool.Pool     // shared by every server
	sockets   []*socket      // for each of cfg.Listen
	srv       *proxy.Server  // the server accepting on the sockets
	res       *config.Resources
	listeners *config.Listeners
	gen       atomic.Pointer[config.Generation]

	metrics     *observe.Metrics // nil without metrics.address and admin.address so far
	metricsLn   net.Listener     // the endpoint's socket; nil when off
	stopMetrics func()
	current     current // srv, for the metrics and the admin listener

	recorder  *observe.Recorder // nil without admin.address
	admin     *admin.Server     // nil without admin.address
	adminCfg  config.Admin      // the admin section serving, which a reload may change
	adminLn   net.Listener      // its socket
	adminStop func()            // stops the admin listener

	draining sync.WaitGroup // servers a reload replaced
	failed   chan error     // an accept loop that ended on its own
	// sig receives the signals serve acts on, caught from the start:
	// once the pid file is written, or systemd or the old process of an
	// upgrade told, a SIGHUP must not find the default action (exit).
	sig chan os.Signal
}

// newLog returns the error and event log cfg asks for, on w.
func newLog(w io.Writer, cfg *config.Config) *slog.Logger {
	return slog.New(config.Handler(w, cfg.Log.Format, config.Level(cfg.Log.Level)))
}

// start readies the proxy cfg (read from path) describes: builds it, binds
// its listeners (taking those inherited from the process an upgrade
// replaces, in), starts its metrics endpoint, and serves. It returns with
// every accept loop running, the pid file written and systemd and the old
// process of an upgrade told. On error nothing is left running (the
// inherited sockets not taken are closed by the caller).
func start(path string, cfg *config.Config, l loaded, stderr io.Writer, log *slog.Logger, in *upgrade.Inherited) (r *running, err error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	log.Info("sluice run", append(currentBuild().logAttrs(), "pid", os.Getpid(), "upgrade", in != nil)...)
	sig := make(chan os.Signal, 1)
	signals := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
	signals = append(append(signals, reopenSignals...), upgradeSignals...)
	signal.Notify(sig, signals...)
	defer func() {
		if err != nil {
			signal.Stop(sig)
		}
	}()
	exe, err := os.Executable()
	if err != nil {
		log.Warn("the executable's path is unknown; binary upgrades will fail", "error", err)
	}
	gen, err := config.Build(cfg)
	if err != nil {
		return nil, err
	}
	if err := gen.OpenLocalCAs(); err != nil {
		return nil, err
	}
	listeners, err := config.NewListeners(cfg, gen)
	if err != nil {
		return nil, err
	}
	logCertificates(log, gen)
	ctx, cancel := context.WithCancel(context.Background())
	p := pool.New(cfg.Limits.PoolBound(), nil)
	srv, res, err := config.NewServerPool(cfg, gen, log, p)
	if err != nil {
		cancel()
		p.Close()
		return nil, err
	}
	// The cleanup on failure works on run, never on r: a return sets r
	// (to nil) before the deferred functions run.
	run := &running{
		path: path, exe: exe, stderr: stderr, ctx: ctx, cancel: cancel, log: log, notify: newNotifier(),
		cfg: cfg, pool: p, srv: srv, res: res, listeners: listeners,
		failed: make(chan error, 1), sig: sig,
	}
	run.gen.Store(gen)
	run.current.p.Store(srv)
	// The collector paces itself by the heap the memory stores do not
	// hold (cache.PaceGC): without a memory store it changes nothing.
	stopPacing := cache.PaceGC()
	go func() {
		<-ctx.Done()
		stopPacing()
	}()
	gen.Start(ctx)
	stopAll := func() {
		if run.adminStop != nil {
			run.adminStop()
		}
		for _, s := range run.sockets {
			s.close()
		}
		quick, stop := context.WithTimeout(context.Background(), time.Second)
		srv.Shutdown(quick) // the clients accepted before the failure
		stop()
		for _, s := range run.sockets {
			s.closeQUIC()
		}
		if run.stopMetrics != nil {
			run.stopMetrics()
		}
		cancel()
		gen.Close()
		res.Close()
		p.Close()
	}
	defer func() {
		if err != nil {
			stopAll()
		}
	}()
	if observed(cfg) {
		run.ensureMetrics()
		run.metrics.ConfigLoaded(l.hash, l.at)
		srv.Observer = run.metrics
	}
	if cfg.Metrics.Address != "" {
		ln, err := metricsListener(cfg.Metrics.Address, in)
		if err != nil {
			return nil, err // "metrics: listen ...: ..."
		}
		run.moveMetrics(ln)
	}
	if cfg.Admin.Address != "" {
		if err := run.startAdmin(cfg, l, in); err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
	}
	for i, l := range cfg.Listen {
		s, err := bind(l.Address, l.Mode, in)
		if err != nil {
			return nil, err
		}
		run.sockets = append(run.sockets, s)
		if listeners.ServesH3(i) {
			if err := s.bindUDP(in); err != nil {
				return nil, err
			}
			warnUDPBuffers(log)
		}
	}
	// The ACME managers start once their challenges' listeners are bound,
	// before serving; their certificates come in the background.
	if err = listeners.StartACME(ctx, gen, run.bound()); err != nil {
		return nil, fmt.Errorf("starting ACME: %w", err)
	}
	if err = run.serveAll(srv, listeners, run.sockets, nil, log); err != nil {
		return nil, err
	}
	if run.admin != nil {
		run.admin.SetListening(true) // connections queue until served
	}
	if cfg.PIDFile != "" {
		if err = writePIDFile(cfg.PIDFile); err != nil {
			return nil, err
		}
	}
	// Nothing fails from here on: this process owns the Unix sockets it
	// inherited, and removes their files when it closes them.
	for _, s := range run.sockets {
		own(s.ln)
	}
	own(run.metricsLn)
	own(run.adminLn)
	if in == nil {
		if err := run.notify.send("READY=1", "STATUS=serving"); err != nil {
			log.Warn("telling systemd", "error", err)
		}
	}
	if err := in.Ready(); err != nil {
		log.Warn("telling the old process of the upgrade that this one serves", "error", err)
	}
	return run, nil
}

// bound returns the address each socket is bound to.
func (r *running) bound() []net.Addr {
	b := make([]net.Addr, len(r.sockets))
	for i, s := range r.sockets {
		b[i] = s.ln.Addr()
	}
	return b
}

// serveAll starts srv's accept loops on sockets, as listeners say, each
// logged as listening; those in kept are handed over from the server that
// accepts on them (their loops stopped first).
func (r *running) serveAll(srv *proxy.Server, listeners *config.Listeners, sockets []*socket, kept map[*socket]bool, log *slog.Logger) error {
	bound := make([]net.Addr, len(sockets))
	for i, s := range sockets {
		bound[i] = s.ln.Addr()
	}
	for i, s := range sockets {
		o := listeners.Options(i, bound)
		attrs := []any{"address", addrString(s.ln.Addr())}
		if o.TLS != nil {
			attrs = append(attrs, "tls", true)
		}
		if len(o.Protocols) > 0 {
			attrs = append(attrs, "protocols", o.Protocols)
		}
		if rd, ok := o.Handler.(*proxy.RedirectHTTPS); ok {
			attrs = append(attrs, "redirect_https_port", rd.Port)
		}
		if kept[s] {
			s.stop()
		}
		s.serve(srv, o, r.failed)
		if listeners.ServesH3(i) {
			if err := s.serveQUIC(srv, listeners.QUIC(i), proxy.ListenerOptions{Handler: o.Handler}, r.failed); err != nil {
				return err
			}
			attrs = append(attrs, "h3", addrString(s.udp.LocalAddr()))
		}
		log.Info("listening", attrs...)
	}
	return nil
}

// metricsListener returns a listener on addr for the metrics endpoint:
// the socket inherited from an upgrade's old process when there is one
// (in), else a new one.
func metricsListener(addr string, in *upgrade.Inherited) (net.Listener, error) {
	ln, err := listen(addr, sock.DefaultUnixMode, in, metricsSocket, listenTCP)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return ln, nil
}

// listenTCP listens on a TCP address, for the metrics endpoint and the
// admin listener (net/http's servers, which keep Go's defaults).
func listenTCP(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// observed reports whether cfg has the servers report to metrics: for
// the metrics endpoint or the admin listener.
func observed(cfg *config.Config) bool { return cfg.Metrics.Address != "" || cfg.Admin.Address != "" }

// ensureMetrics makes the metrics the servers report to, once.
func (r *running) ensureMetrics() {
	if r.metrics != nil {
		return
	}
	m := observe.New(r.pool)
	m.WatchServers(func(report func(observe.ServerState)) {
		r.gen.Load().Servers(func(upstream string, s *balance.Server) {
			report(observe.ServerState{Upstream: upstream, Server: s.Addr, Healthy: s.Healthy(), Drained: s.Drained(), Outstanding: s.Outstanding()})
		})
	})
	m.WatchProxy(&r.current)
	m.WatchRateLimits(func(report func(observe.RateLimitState)) {
		r.gen.Load().RateLimits(func(route string, c ratelimit.Counts) {
			report(observe.RateLimitState{Route: route, Allowed: c.Allowed, Limited: c.Limited, StoreError: c.StoreError})
		})
	})
	m.WatchIdempotency(func(report func(observe.IdempotencyState)) {
		r.gen.Load().Idempotency(func(route string, c idempotency.Counts) {
			s := observe.IdempotencyState{Route: route}
			c.Each(func(result string, n uint64) {
				s.Results = append(s.Results, observe.IdempotencyResult{Result: result, Count: n})
			})
			report(s)
		})
	})
	m.WatchCache(func(report func(observe.CacheState)) {
		for _, st := range r.gen.Load().CacheStates() {
			s := observe.CacheState{Store: st.Name, Objects: st.Stats.Objects, Bytes: st.Stats.Bytes,
				Capacity: st.Stats.Capacity, Evictions: st.Stats.Evictions, Purged: st.Stats.Purged}
			st.Counts.Each(func(result string, n uint64) {
				s.Results = append(s.Results, observe.CacheResult{Result: result, Count: n})
			})
			report(s)
		}
	})
	r.metrics = m
}

// moveMetrics stops the metrics endpoint that runs, if one does, and
// serves it on ln, unless ln is nil.
func (r *running) moveMetrics(ln net.Listener) {
	if r.stopMetrics != nil {
		r.stopMetrics()
		r.stopMetrics, r.metricsLn = nil, nil
	}
	if ln == nil {
		return
	}
	r.ensureMetrics()
	r.metricsLn = ln
	r.stopMetrics = serveMetrics(ln, r.metrics, r.log)
}

// serveMetrics serves /metrics on ln until stop is called.
func serveMetrics(ln net.Listener, m *observe.Metrics, log *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	log.Info("metrics", "address", addrString(ln.Addr()), "path", "/metrics")
	return func() { hs.Close() }
}

// upgraded is the outcome of a binary upgrade.
type upgraded struct {
	pid    int
	err    error
	relays []relay // the HTTP/3 sockets' relays to the new process
}

// relay is this process's side of the relay by which it passes on to the
// new process of an upgrade the datagrams of the new one's connections
// (quicshare), for a socket.
type relay struct {
	s    *socket
	keep *net.UnixConn
}

// handOver makes the HTTP/3 sockets pass, from now on, the datagrams not
// of this process's connections to the new process that serves; or, when
// the upgrade failed, closes the relays.
func (u upgraded) handOver() {
	for _, r := range u.relays {
		if u.err != nil || r.s.udp == nil {
			r.keep.Close()
			continue
		}
		r.s.udp.Forward(r.keep)
	}
}

// serve runs until SIGINT or SIGTERM, or a binary upgrade's new process
// serves, then drains: no new connections, in-flight requests get up to
// timeouts.drain to finish. SIGHUP reloads, SIGUSR1 reopens the access
// log, SIGUSR2 upgrades. It returns the exit code.
func (r *running) serve() int {
	sig := r.sig
	upgrades := make(chan upgraded, 1)
	upgrading := false
	code := 0
	handedOver := false
wait:
	for {
		select {
		case s := <-sig:
			switch {
			case s == syscall.SIGHUP:
				if upgrading {
					r.log.Warn("reload refused: a binary upgrade is under way; send it again once it is over")
					continue
				}
				r.notify.send(reloading()...)
				r.reload()
				r.notify.send("READY=1", "STATUS=serving")
			case slices.Contains(reopenSignals, s):
				r.reopen()
			case slices.Contains(upgradeSignals, s):
				if upgrading {
					r.log.Warn("binary upgrade refused: one is under way")
					continue
				}
				upgrading = true
				r.startUpgrade(upgrades)
			default:
				if upgrading { // its outcome first: the sockets are being handed over
					r.log.Info("shutting down once the binary upgrade under way is over", "signal", s.String())
					u := <-upgrades
					u.handOver()
					if u.err == nil {
						r.drainForUpgrade(u.pid)
						r.notify.send(fmt.Sprintf("MAINPID=%d", u.pid), "READY=1", "STATUS=serving")
						handedOver = true
						break wait
					}
					r.upgradeFailed(u.err)
				}
				r.log.Info("shutting down", "signal", s.String(), "drain", r.cfg.Timeouts.Drain)
				r.notify.send("STOPPING=1")
				break wait
			}
		case u := <-upgrades:
			upgrading = false
			u.handOver()
			if u.err != nil {
				r.upgradeFailed(u.err)
				continue
			}
			// The new process accepts on every socket: this one stops
			// and hands systemd over to it.
			r.drainForUpgrade(u.pid)
			r.notify.send(fmt.Sprintf("MAINPID=%d", u.pid), "READY=1", "STATUS=serving")
			handedOver = true
			break wait
		case err := <-r.failed:
			r.log.Error("serving", "error", err)
			code = 1
			break wait
		}
	}
	r.stop(handedOver)
	return code
}

// drainForUpgrade begins the drain as the new process of an upgrade (pid)
// serves, and then says so. This process takes no new request from here
// on: its HTTP/2 and HTTP/3 connections get GOAWAY now, not once stop has
// waited for the HTTP/3 handshakes begun here, which can take seconds (a
// handshake that never completes is given up by quic-go). A request taken
// during that wait would count against this process's drain timeout;
// told GOAWAY, its client sends it to the new process instead.
func (r *running) drainForUpgrade(pid int) {
	r.srv.Drain()
	r.log.Info("binary upgrade: the new process serves; draining", "pid", pid, "drain", r.cfg.Timeouts.Drain)
}

// upgradeFailed logs why a binary upgrade failed, and writes the pid file
// again, which the new process may have written before it failed.
func (r *running) upgradeFailed(err error) {
	r.log.Error("binary upgrade failed; still serving", "error", err)
	if r.cfg.PIDFile != "" {
		if err := writePIDFile(r.cfg.PIDFile); err != nil {
			r.log.Error("rewriting the pid file", "error", err)
		}
	}
}

// reopen reopens the access log file, for log rotation.
func (r *running) reopen() {
	cfg := r.cfg
	if !cfg.AccessLog.Enabled || cfg.AccessLog.Path == "" {
		r.log.Info("no access log file to reopen")
		return
	}
	if err := r.res.ReopenLogs(); err != nil {
		r.log.Error("reopening the access log", "path", cfg.AccessLog.Path, "error", err)
		return
	}
	r.log.Info("access log reopened", "path", cfg.AccessLog.Path)
}

// startUpgrade starts the executable sluice run was started from (read
// from disk again, so a new binary installed at its path) with this
// process's sockets, and sends the outcome to done once the new process
// serves or has failed.
func (r *running) startUpgrade(done chan<- upgraded) {
	if r.exe == "" {
		done <- upgraded{err: errors.New("the executable's path is unknown")}
		return
	}
	// The sockets stay open until the outcome is known: the signal loop
	// neither reloads nor stops while an upgrade is under way.
	var socks []upgrade.Socket
	var relays []relay
	var gives []*os.File
	for _, s := range r.sockets {
		socks = append(socks, upgrade.Socket{Address: s.address, Conn: s.ln})
		if s.udp != nil {
			socks = append(socks, upgrade.Socket{Address: udpSocket + s.address, Conn: s.udp})
			keep, give, err := s.udp.Successor()
			if err != nil {
				// Both processes read the socket while this one drains.
				r.log.Warn("binary upgrade: HTTP/3 datagrams cannot be passed on to the new process", "address", s.address, "error", err)
				continue
			}
			relays = append(relays, relay{s: s, keep: keep})
			gives = append(gives, give)
			socks = append(socks, upgrade.Socket{Address: relaySocket + s.address, Conn: give})
		}
	}
	if sc, ok := r.metricsLn.(syscall.Conn); ok {
		socks = append(socks, upgrade.Socket{Address: metricsSocket + r.cfg.Metrics.Address, Conn: sc})
	}
	if sc, ok := r.adminLn.(syscall.Conn); ok {
		socks = append(socks, upgrade.Socket{Address: adminSocket + r.adminCfg.Address, Conn: sc})
	}
	r.log.Info("binary upgrade: starting the new process", "path", r.exe, "sockets", len(socks))
	exe, args := r.exe, []string{"run", "-c", r.path}
	go func() {
		p, err := upgrade.Start(r.ctx, exe, args, socks, upgradeTimeout)
		for _, f := range gives {
			f.Close() // the new process has its copy, or has failed
		}
		if err != nil {
			done <- upgraded{err: err, relays: relays}
			return
		}
		done <- upgraded{pid: p.Pid, relays: relays}
	}()
}

// stop ends serving: the accept loops stop and the sockets close (the
// new process of an upgrade holds its own copies of them), then the
// server drains for timeouts.drain, with those a reload replaced, and
// the pool, logs, background work and pid file (when still this
// process's) are let go.
func (r *running) stop(handedOver bool) {
	defer signal.Stop(r.sig)
	if handedOver {
		// The new process serves on the Unix sockets: their files stay.
		for _, s := range r.sockets {
			disown(s.ln)
		}
		disown(r.metricsLn)
		disown(r.adminLn)
		// New HTTP/3 connection attempts go to the new process now
		// (quicshare): the handshakes begun here complete first, and are
		// taken (with GOAWAY, drainForUpgrade having begun the drain: their
		// clients send their requests again to the new process), instead
		// of being refused.
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeouts.Drain)
		for _, s := range r.sockets {
			s.unlistenQUIC(ctx)
		}
		cancel()
	}
	for _, s := range r.sockets {
		s.close()
	}
	if r.stopMetrics != nil {
		r.stopMetrics()
	}
	if r.admin != nil {
		r.admin.SetListening(false)
		r.adminStop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeouts.Drain)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		r.log.Warn("drain timeout passed; remaining connections closed", "error", err)
	}
	r.draining.Wait()
	for _, s := range r.sockets {
		if s.udp != nil {
			if n, _ := s.udp.Counts(); n > 0 {
				r.log.Info("HTTP/3: datagrams passed on to the new process while draining", "address", addrString(s.udp.LocalAddr()), "datagrams", n)
			}
		}
		s.closeQUIC() // its connections drained with the server
	}
	r.cancel()
	r.res.Close()
	r.pool.Close()
	r.gen.Load().Close()
	if r.cfg.PIDFile != "" && !handedOver {
		removePIDFile(r.cfg.PIDFile)
	}
	r.log.Info("stopped")
}
