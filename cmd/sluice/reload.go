package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/sluice-proxy/sluice/config"
)

// reload reads the config file again and applies all of it without
// dropping a connection, or, when it does not load, build or bind, changes
// nothing and logs why.
//
// Routes and upstreams are swapped: requests in flight finish with the
// generation they started with, and servers that stay keep their health
// state. The TLS listeners that stay read their certificates, keys and
// client CAs again: new handshakes get them, connections already open
// keep theirs. A local CA (tls.internal) keeps its root and what it
// issued, which its storage holds. An ACME manager whose acme section
// stays goes on (its certificates kept, nothing asked again); one for a
// new or changed section starts, and the one it replaces, or whose
// section is gone, stops.
//
// When the file changes what the server holds (config.ServerChanged:
// listeners, client timeouts, limits, logs, forwarding; or turns metrics
// on or off), a new server takes over the sockets (see running) and the
// old one drains; the new one goes on with the old one's connections to
// upstreams, HTTP/1.1 (the pool) and HTTP/2. The metrics endpoint moves
// when its address changes; the admin listener opens, moves or closes as
// admin.address says. The pid file is written at its new path, and the
// old one removed. The pool every server shares takes the new
// limits.max_idle_upstream_conns.
func (r *running) reload() {
	cfg, hash, err := loadConfig(r.path)
	if err != nil {
		r.log.Error("reload failed; still serving the previous configuration", "error", err)
		r.reloaded(err, "", nil)
		return
	}
	// The new generation's balancers and ACME managers log to
	// slog.Default as Build makes them: the new log, put back to the old
	// one if the reload fails.
	log := r.log
	if cfg.Log != r.cfg.Log {
		log = newLog(r.stderr, cfg)
	}
	slog.SetDefault(log)
	fail := func(err error) {
		slog.SetDefault(r.log)
		r.log.Error("reload failed; still serving the previous configuration", "error", err)
		r.reloaded(err, "", nil)
	}
	gen, err := config.Build(cfg)
	if err != nil {
		fail(err)
		return
	}
	// The local CAs open their storage again: the same root, and the
	// certificates issued so far.
	if err := gen.OpenLocalCAs(); err != nil {
		fail(err)
		return
	}
	changed := config.ServerChanged(r.cfg, cfg)
	if observed(r.cfg) != observed(cfg) {
		changed = append(changed, "metrics") // the server's Observer
	}
	moveMetrics := cfg.Metrics.Address != r.cfg.Metrics.Address
	var metricsLn, adminLn net.Listener
	closeNew := func() {
		for _, ln := range []net.Listener{metricsLn, adminLn} {
			if ln != nil {
				ln.Close()
			}
		}
	}
	if moveMetrics && cfg.Metrics.Address != "" {
		if metricsLn, err = metricsListener(cfg.Metrics.Address, nil); err != nil {
			fail(err)
			return
		}
	}
	if r.admin == nil && cfg.Admin.Address != "" {
		// Turned on: bound first, as a new listener is, so that an
		// address taken fails the reload and changes nothing.
		if adminLn, err = listen(cfg.Admin.Address, cfg.Admin.Mode, nil, "", listenTCP); err != nil {
			closeNew()
			fail(fmt.Errorf("admin: %w", err))
			return
		}
	}
	if observed(cfg) {
		r.ensureMetrics()
	}
	old := r.gen.Load()
	tlsListeners := 0 // those the new TLS settings reached
	if len(changed) == 0 {
		gen.Carry(old)
		gen.Start(r.ctx)
		if err := r.listeners.StartACME(r.ctx, gen, r.bound()); err != nil {
			r.log.Error("reload: starting ACME", "error", err)
		}
		r.srv.SetHandler(gen.Table)
		tlsListeners = len(r.listeners.Reload(gen))
		r.gen.Store(gen)
	} else if tlsListeners, err = r.replaceServer(cfg, gen, old, log); err != nil {
		closeNew()
		fail(err)
		return
	}
	r.log = log
	for i, s := range r.sockets { // in the order of cfg.Listen
		if err := s.setMode(cfg.Listen[i].Mode); err != nil {
			r.log.Error("reload: a Unix socket keeps its mode", "address", s.address, "mode", fmt.Sprintf("%04o", cfg.Listen[i].Mode), "error", err)
		}
	}
	logWarnings(log, cfg)
	if moveMetrics {
		r.moveMetrics(metricsLn)
	}
	for _, m := range old.ACME() { // those gen did not carry over
		r.log.Info("ACME certificates no longer managed", "domains", m.Domains())
	}
	old.Close()
	r.reloaded(nil, hash, gen)
	r.moveAdmin(cfg.Admin, loaded{hash, time.Now()}, adminLn)
	if cfg.PIDFile != r.cfg.PIDFile {
		if cfg.PIDFile != "" {
			if err := writePIDFile(cfg.PIDFile); err != nil {
				r.log.Error("reload: writing the pid file", "error", err)
			}
		}
		if r.cfg.PIDFile != "" {
			removePIDFile(r.cfg.PIDFile)
		}
	}
	if bound := cfg.Limits.PoolBound(); bound != r.cfg.Limits.PoolBound() {
		r.pool.SetMaxTotal(bound)
	}
	r.cfg = cfg
	logCertificates(r.log, gen)
	attrs := []any{"routes", len(cfg.Routes), "upstreams", len(cfg.Upstreams), "listeners", len(cfg.Listen), "tls_listeners", tlsListeners}
	if len(changed) > 0 {
		attrs = append(attrs, "new_server", changed)
	}
	r.log.Info("reloaded", attrs...)
}

// replaceServer starts a server for cfg, serving gen, on the sockets of
// the listeners cfg keeps (matched by address, in order) and on new ones
// for those it adds; hands the kept sockets over; closes those cfg no
// longer lists; and drains the old server in the background. It returns
// the number of TLS listeners. The new server logs to log. When a new
// listener cannot be bound, it undoes what it did and returns the error.
func (r *running) replaceServer(cfg *config.Config, gen *config.Generation, old *config.Generation, log *slog.Logger) (int, error) {
	listeners, err := config.NewListeners(cfg, gen)
	if err != nil {
		return 0, err
	}
	srv, res, err := config.NewServerPool(cfg, gen, log, r.pool)
	if err != nil {
		return 0, err
	}
	if observed(cfg) {
		srv.Observer = r.metrics
	}
	next := make([]*socket, len(cfg.Listen))
	kept := make(map[*socket]bool)
	for j, l := range cfg.Listen {
		for _, s := range r.sockets {
			if !kept[s] && s.address == l.Address {
				next[j] = s
				kept[s] = true
				break
			}
		}
	}
	for j, l := range cfg.Listen {
		if next[j] != nil {
			continue
		}
		s, err := bind(l.Address, l.Mode, nil)
		if err != nil {
			for k, s := range next {
				if s != nil && !kept[s] && k < j {
					s.close()
					s.closeQUIC()
				}
			}
			res.Close()
			return 0, err
		}
		next[j] = s
	}
	for j, s := range next {
		if !listeners.ServesH3(j) {
			continue
		}
		if err := s.bindUDP(nil); err != nil {
			for _, s := range next {
				if !kept[s] {
					s.close()
					s.closeQUIC()
				}
			}
			res.Close()
			return 0, err
		}
	}

	// Nothing fails from here on: a kept TLS socket keeps its switch, and
	// with it its session ticket keys.
	for j, s := range next {
		for k, o := range r.sockets {
			if kept[s] && o == s {
				listeners.Adopt(j, r.listeners, k, gen)
			}
		}
	}
	gen.Carry(old)
	gen.Start(r.ctx)
	bound := make([]net.Addr, len(next))
	for i, s := range next {
		bound[i] = s.ln.Addr()
	}
	if err := listeners.StartACME(r.ctx, gen, bound); err != nil {
		r.log.Error("reload: starting ACME", "error", err)
	}
	// Its HTTP/1.1 tries share the pool; its HTTP/2 ones the old
	// server's connections too.
	srv.ShareUpstreamConns(r.srv)
	if err := r.serveAll(srv, listeners, next, kept, log); err != nil {
		r.log.Error("reload: serving HTTP/3", "error", err)
	}
	var gone []*socket
	for _, s := range r.sockets {
		if !kept[s] {
			s.close()
			gone = append(gone, s)
			r.log.Info("stopped listening; its connections drain", "address", addrString(s.ln.Addr()))
		}
	}
	oldSrv, oldRes, drain := r.srv, r.res, r.cfg.Timeouts.Drain
	r.sockets, r.srv, r.res, r.listeners = next, srv, res, listeners
	r.current.p.Store(srv)
	r.gen.Store(gen)
	r.draining.Add(1)
	go func() {
		defer r.draining.Done()
		ctx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		if err := oldSrv.Shutdown(ctx); err != nil {
			log.Warn("reload: drain timeout passed; the old server's remaining connections closed", "error", err)
		}
		for _, s := range gone {
			s.closeQUIC()
		}
		oldRes.Close()
	}()
	n := 0
	for _, l := range cfg.Listen {
		if l.TLS != nil {
			n++
		}
	}
	return n, nil
}
