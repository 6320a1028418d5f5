// Command sluice is a reverse proxy whose retries are right: it retries
// every request that can safely be retried, and never sends a request twice
// unless that is safe.
//
//	sluice run -c sluice.yaml       serve as the file says
//	sluice validate -c sluice.yaml  check the file; exit 1 with every problem
//	sluice demo                     a proxy and built-in upstreams to try
//	sluice version                  the version, commit, build time and Go version
//	sluice help                     every command and its flags (COMMAND -h: one)
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/admin"
	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/observe"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/ratelimit"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if wantsHelp(args[1:]) {
		// sluice COMMAND -h: the command's flags, on stdout, exit 0.
		return commandHelp(args[0], stdout, stderr)
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stderr)
	case "validate":
		return cmdValidate(args[1:], stdout, stderr)
	case "demo":
		return cmdDemo(args[1:], stdout, stderr)
	case "version":
		return cmdVersion(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return commandHelp(args[1], stdout, stderr)
		}
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

type flags struct {
	config     string
	cpuprofile string
}

func parseFlags(name string, args []string, stderr io.Writer) (flags, bool) {
	var f flags
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "c", "sluice.yaml", "config `file`")
	if name == "run" {
		fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile to `file` until exit")
	}
	if err := fs.Parse(args); err != nil {
		return f, false
	}
	return f, true
}

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	f, ok := parseFlags("validate", args, stderr)
	if !ok {
		return 2
	}
	path := f.config
	cfg, err := config.Load(path)
	if err == nil {
		_, err = config.Build(cfg)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (%d listeners, %d routes, %d upstreams)\n", path, len(cfg.Listen), len(cfg.Routes), len(cfg.Upstreams))
	return 0
}

func cmdRun(args []string, stderr io.Writer) int {
	f, ok := parseFlags("run", args, stderr)
	if !ok {
		return 2
	}
	path := f.config
	if f.cpuprofile != "" {
		out, err := os.Create(f.cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		pprof.StartCPUProfile(out)
		defer func() {
			pprof.StopCPUProfile()
			out.Close()
		}()
	}
	cfg, hash, err := loadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	loadedAt := time.Now()
	log := slog.New(config.Handler(stderr, cfg.Log.Format, config.Level(cfg.Log.Level)))
	slog.SetDefault(log)
	logDescriptorLimit(log, cfg)
	gen, err := config.Build(cfg)
	if err != nil {
		log.Error("building the proxy", "error", err)
		return 1
	}
	listeners, err := config.NewListeners(cfg, gen)
	if err != nil {
		log.Error("building the proxy", "error", err)
		return 1
	}
	logCertificates(log, gen)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gen.Start(ctx)
	srv, res, err := config.NewServer(cfg, gen, log)
	if err != nil {
		log.Error("starting", "error", err)
		return 1
	}
	defer res.Close()
	r := &running{path: path, cfg: cfg, srv: srv, listeners: listeners, ctx: ctx, log: log}
	r.gen.Store(gen)
	defer func() { r.gen.Load().Close() }()
	if cfg.Metrics.Address != "" || cfg.Admin.Address != "" {
		m := observe.New(srv.Pool)
		m.WatchServers(func(report func(observe.ServerState)) {
			r.gen.Load().Servers(func(upstream string, s *balance.Server) {
				report(observe.ServerState{Upstream: upstream, Server: s.Addr, Healthy: s.Healthy(), Drained: s.Drained(), Outstanding: s.Outstanding()})
			})
		})
		m.WatchProxy(srv)
		m.ConfigLoaded(hash, loadedAt)
		m.WatchRateLimits(func(report func(observe.RateLimitState)) {
			r.gen.Load().RateLimits(func(route string, c ratelimit.Counts) {
				report(observe.RateLimitState{Route: route, Allowed: c.Allowed, Limited: c.Limited, StoreError: c.StoreError})
			})
		})
		srv.Observer = m
		r.metrics = m
	}
	if cfg.Metrics.Address != "" {
		stop, err := serveMetrics(cfg.Metrics.Address, r.metrics, log)
		if err != nil {
			log.Error("metrics", "address", cfg.Metrics.Address, "error", err)
			return 1
		}
		defer stop()
	}
	if cfg.Admin.Address != "" {
		r.recorder = observe.NewRecorder()
		r.metrics.Record(r.recorder)
		r.admin = &admin.Server{
			Generation: r.gen.Load, Proxy: srv, Pool: srv.Pool, Metrics: r.metrics, Recorder: r.recorder,
			Pprof: cfg.Admin.Pprof, Log: log,
		}
		r.admin.SetConfig(hash, loadedAt)
		bound, stop, err := r.admin.Listen(cfg.Admin.Address)
		if err != nil {
			log.Error("admin", "address", cfg.Admin.Address, "error", err)
			return 1
		}
		r.adminCfg, r.adminStop = cfg.Admin, stop
		defer func() { r.adminStop() }()
		logAdmin(log, bound, cfg.Admin.Pprof)
	}
	var lns []net.Listener
	for _, l := range cfg.Listen {
		ln, err := proxy.Listen(l.Address)
		if err != nil {
			log.Error("listening", "address", l.Address, "error", err)
			for _, ln := range lns {
				ln.Close()
			}
			return 1
		}
		lns = append(lns, ln)
	}
	bound := make([]net.Addr, len(lns))
	for i, ln := range lns {
		bound[i] = ln.Addr()
	}
	opts := make([]proxy.ListenerOptions, len(lns))
	for i := range lns {
		opts[i] = listeners.Options(i, bound)
	}
	// The ACME managers start once their challenges' listeners are bound,
	// before serving; their certificates come in the background.
	r.bound = bound
	if err := listeners.StartACME(ctx, gen, bound); err != nil {
		log.Error("starting ACME", "error", err)
		for _, ln := range lns {
			ln.Close()
		}
		return 1
	}
	reopen := func() {
		if !cfg.AccessLog.Enabled || cfg.AccessLog.Path == "" {
			log.Info("no access log file to reopen")
			return
		}
		if err := res.ReopenLogs(); err != nil {
			log.Error("reopening the access log", "path", cfg.AccessLog.Path, "error", err)
			return
		}
		log.Info("access log reopened", "path", cfg.AccessLog.Path)
	}
	if r.admin != nil {
		// The listeners are bound: connections queue until served.
		r.admin.SetListening(true)
		defer r.admin.SetListening(false)
	}
	return serve(srv, lns, opts, cfg.Timeouts.Drain, log, r.reload, reopen)
}

// loadConfig reads and parses the config file at path, and returns it
// with the SHA-256 of the file's bytes, which names the config running in
// the admin API and the metrics.
func loadConfig(path string) (*config.Config, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	cfg, err := config.Parse(path, data)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(data)
	return cfg, hex.EncodeToString(sum[:]), nil
}

// running is the proxy as sluice run serves it: one server, the
// generation of routes and upstreams it serves, which SIGHUP replaces, and
// its listeners, whose TLS settings SIGHUP replaces.
type running struct {
	path      string
	cfg       *config.Config // as started: what a reload cannot change
	srv       *proxy.Server
	listeners *config.Listeners
	bound     []net.Addr // each listener's address as bound
	gen       atomic.Pointer[config.Generation]
	ctx       context.Context
	log       *slog.Logger
	metrics   *observe.Metrics  // nil without metrics.address and admin.address
	recorder  *observe.Recorder // nil without admin.address
	admin     *admin.Server     // nil without admin.address
	adminCfg  config.Admin      // the admin section serving, which a reload may change
	adminStop func()            // stops the admin listener
}

// reload reads the config file again and swaps in its routes and
// upstreams without dropping a connection: requests in flight finish with
// the generation they started with, and servers that stay keep their
// health state. The TLS listeners that stay read their certificates, keys
// and client CAs again: new handshakes get them, connections already open
// keep theirs, and session tickets stay valid. An ACME manager whose acme
// section stays goes on (its certificates kept, nothing asked again); one
// for a new or changed section starts, and the one it replaces, or whose
// section is gone, stops. A file that does not load or build (a
// certificate that cannot be read, say) changes nothing.
func (r *running) reload() {
	cfg, hash, err := loadConfig(r.path)
	if err != nil {
		r.log.Error("reload failed; still serving the previous configuration", "error", err)
		r.reloaded(err, "", nil)
		return
	}
	if sections := config.RestartOnly(r.cfg, cfg); len(sections) > 0 {
		r.log.Warn("reload: these sections changed and take effect only on restart", "sections", sections)
	}
	gen, err := config.Build(cfg)
	if err != nil {
		r.log.Error("reload failed; still serving the previous configuration", "error", err)
		r.reloaded(err, "", nil)
		return
	}
	old := r.gen.Load()
	gen.Carry(old)
	gen.Start(r.ctx)
	if err := r.listeners.StartACME(r.ctx, gen, r.bound); err != nil {
		r.log.Error("reload: starting ACME", "error", err)
	}
	r.srv.SetHandler(gen.Table)
	tlsListeners := r.listeners.Reload(gen)
	r.gen.Store(gen)
	for _, m := range old.ACME() { // those gen did not carry over
		r.log.Info("ACME certificates no longer managed", "domains", m.Domains())
	}
	old.Close()
	r.reloaded(nil, hash, gen)
	r.moveAdmin(cfg.Admin)
	logCertificates(r.log, gen)
	r.log.Info("reloaded", "routes", len(cfg.Routes), "upstreams", len(cfg.Upstreams), "tls_listeners", len(tlsListeners))
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
	keep := map[[2]string]bool{}
	gen.Servers(func(upstream string, s *balance.Server) { keep[[2]string{upstream, s.Addr}] = true })
	r.recorder.Retain(func(upstream, addr string) bool { return keep[[2]string{upstream, addr}] })
}

// moveAdmin applies a reloaded admin section: the listener moves to a new
// address (the old one closes once the new one is open; if it cannot be
// opened, the old one stays), or reopens on its address when only pprof
// changed. Turning the listener on or off takes a restart (RestartOnly
// says so).
func (r *running) moveAdmin(c config.Admin) {
	if r.admin == nil || c.Address == "" || c == r.adminCfg {
		return
	}
	if c.Address == r.adminCfg.Address {
		r.adminStop() // the address must be free again
	}
	r.admin.Pprof = c.Pprof
	bound, stop, err := r.admin.Listen(c.Address)
	if err != nil {
		r.admin.Pprof = r.adminCfg.Pprof
		if c.Address == r.adminCfg.Address {
			r.log.Error("reload: reopening the admin listener failed; it is closed until a reload or restart opens it", "address", c.Address, "error", err)
			r.adminStop, r.adminCfg = func() {}, config.Admin{}
			return
		}
		r.log.Error("reload: the admin listener stays where it was", "address", r.adminCfg.Address, "new_address", c.Address, "error", err)
		return
	}
	if c.Address != r.adminCfg.Address {
		r.adminStop()
	}
	r.adminCfg, r.adminStop = c, stop
	logAdmin(r.log, bound, c.Pprof)
}

// logAdmin logs where the admin listener serves.
func logAdmin(log *slog.Logger, bound net.Addr, pprof bool) {
	log.Info("admin", "address", bound.String(), "status", "http://"+bound.String()+"/status", "pprof", pprof)
}

// logCertificates logs the certificates read from the files of each TLS
// listener of gen: the file, the names and when it expires; a warning for
// one expired or not yet valid. (The ACME managers log theirs as they
// come.)
func logCertificates(log *slog.Logger, gen *config.Generation) {
	now := time.Now()
	for i, cs := range gen.Files {
		if cs == nil {
			continue
		}
		l := gen.Config.Listen[i]
		for j, c := range cs.List() {
			level, msg := slog.LevelInfo, "certificate"
			switch {
			case now.After(c.Leaf.NotAfter):
				level, msg = slog.LevelWarn, "certificate expired"
			case now.Before(c.Leaf.NotBefore):
				level, msg = slog.LevelWarn, "certificate not yet valid"
			}
			log.Log(context.Background(), level, msg, "listen", l.Address, "file", l.TLS.Certificates[j].Cert,
				"names", c.Leaf.DNSNames, "not_after", c.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
	}
}

// serveMetrics serves /metrics on addr until stop is called.
func serveMetrics(addr string, m *observe.Metrics, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	log.Info("metrics", "address", ln.Addr().String(), "path", "/metrics")
	return func() { hs.Close() }, nil
}

// serve runs srv on lns until SIGINT or SIGTERM, then drains: no new
// connections, in-flight requests get up to drain to finish. SIGHUP calls
// reload and SIGUSR1 reopen, when there are.
func serve(srv *proxy.Server, lns []net.Listener, opts []proxy.ListenerOptions, drain time.Duration, log *slog.Logger, reload, reopen func()) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, append([]os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}, reopenSignals...)...)
	defer signal.Stop(sig)

	var wg sync.WaitGroup
	failed := make(chan error, len(lns))
	for i, ln := range lns {
		var o proxy.ListenerOptions
		if i < len(opts) {
			o = opts[i]
		}
		attrs := []any{"address", ln.Addr().String()}
		if o.TLS != nil {
			attrs = append(attrs, "tls", true)
		}
		if len(o.Protocols) > 0 {
			attrs = append(attrs, "protocols", o.Protocols)
		}
		if rd, ok := o.Handler.(*proxy.RedirectHTTPS); ok {
			attrs = append(attrs, "redirect_https_port", rd.Port)
		}
		log.Info("listening", attrs...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.ServeWith(ln, o); err != nil && !errors.Is(err, proxy.ErrServerClosed) {
				failed <- err
			}
		}()
	}
	code := 0
wait:
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGHUP {
				if reload != nil {
					reload()
				}
				continue
			}
			if slices.Contains(reopenSignals, s) {
				if reopen != nil {
					reopen()
				}
				continue
			}
			log.Info("shutting down", "signal", s.String(), "drain", drain)
			break wait
		case err := <-failed:
			log.Error("serving", "error", err)
			code = 1
			break wait
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("drain timeout passed; remaining connections closed", "error", err)
	}
	wg.Wait()
	log.Info("stopped")
	return code
}
