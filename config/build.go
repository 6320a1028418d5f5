package config

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-proxy/sluice/accesslog"
	"github.com/sluice-proxy/sluice/acme"
	"github.com/sluice-proxy/sluice/auth"
	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/cache"
	"github.com/sluice-proxy/sluice/compress"
	"github.com/sluice-proxy/sluice/h2"
	"github.com/sluice-proxy/sluice/idempotency"
	"github.com/sluice-proxy/sluice/internal/logbuf"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/ratelimit"
	"github.com/sluice-proxy/sluice/retry"
	"github.com/sluice-proxy/sluice/route"
	"github.com/sluice-proxy/sluice/static"
	"github.com/sluice-proxy/sluice/tlsterm"
	"github.com/sluice-proxy/sluice/upstream"
)

// Generation is the running form of one Config: the routing table with its
// upstream groups, each with its servers, connection options, retry policy
// and load balancer. It is built whole before it serves, so that a reload
// can build the next generation beside the running one and swap the proxy's
// handler (proxy.Server.SetHandler) without dropping a connection.
type Generation struct {
	Config    *Config
	Table     *route.Table
	Upstreams map[string]*upstream.Group
	// TLS holds, for each of Config.Listen, its TLS settings with the
	// certificates read from its files, and its ACME manager's; nil for
	// a plain listener. A reload hands them to the TLS listeners that
	// stay (Listeners.Reload).
	TLS []*tlsterm.Settings
	// Files holds, for each of Config.Listen, the certificates read from
	// its files; nil for a listener with none.
	Files []*tlsterm.Certificates
	// AdminToken is the token read from admin.token_file; "" without one.
	AdminToken string

	// limiters are the routes' rate limiters, by name (routeName), for
	// Carry and for metrics; redis is their Redis client, nil when no
	// route keeps its budgets there. Close closes it.
	limiters map[string]*ratelimit.Limiter
	redis    *redis.Client

	// layers are the routes' idempotency layers, by name (routeName), for
	// Carry, metrics and Close; idemRedis is their Redis client, nil when
	// no route keeps its records there, closed once the layers' last
	// claims ended after Close.
	layers    map[string]*idempotency.Layer
	idemRedis *redis.Client

	// stores are the cache stores, by name (storeOrder: in file order),
	// caches the routes' caches, fleet the purge subscriber of a file with
	// a redis section (fleetRedis its client).
	stores     map[string]*storeSlot
	storeOrder []string
	caches     []*cache.Cache
	fleet      *cache.Fleet
	fleetRedis *redis.Client

	// acme are the ACME managers of the TLS listeners with an acme
	// section, one for each distinct section: made by Build, started by
	// Listeners.StartACME, stopped by Close unless a later generation
	// took them over (Carry).
	acme []*acmeSlot
	// localCAs are the local CAs of the TLS listeners with an internal
	// section, one for each storage: made by Build, opened by
	// OpenLocalCAs. Nothing of theirs runs in the background.
	localCAs []*localCASlot
}

// Start starts the background work of every upstream (active health
// checks, DNS re-resolution) until Close. The ACME managers start apart,
// once the listeners are bound (Listeners.StartACME).
func (g *Generation) Start(ctx context.Context) {
	for _, u := range g.Upstreams {
		u.Balancer().Start(ctx)
	}
	g.openStores(slog.Default())
	g.startFleet(ctx)
}

// Carry hands the health state of old's upstreams to g's upstreams of the
// same name, server by server (see balance.Group.Carry), the rate limits'
// state of old's routes to g's routes of the same host and path prefix
// (their counts, and the budgets of a local store when both keep them in
// one: see ratelimit.Limiter.Carry), likewise the idempotency layers'
// (their counts, and the records of a local store: see
// idempotency.Layer.Carry), and old's ACME
// managers to g where g has the same acme section (its ca_root's contents
// included): they go on running, with the certificates they hold, and
// old's Close leaves them alone. For a reload, before g starts.
func (g *Generation) Carry(old *Generation) {
	if old == nil {
		return
	}
	for name, u := range g.Upstreams {
		if o := old.Upstreams[name]; o != nil {
			u.Balancer().Carry(o.Balancer())
		}
	}
	for name, l := range g.limiters {
		l.Carry(old.limiters[name])
	}
	for name, l := range g.layers {
		l.Carry(old.layers[name])
	}
	g.carryStores(old)
	for _, s := range g.acme {
		for _, o := range old.acme {
			if o.m != nil && o.key == s.key {
				s.m, s.started = o.m, o.started
				o.m = nil
				for _, i := range s.listeners {
					g.TLS[i].Certificates = s.m.Source(g.Files[i])
				}
				break
			}
		}
	}
}

// ServerChanged lists the sections that differ between two configs and
// that the proxy server itself holds: the listeners (their addresses,
// whether they have tls or redirect, their protocols), client timeouts,
// limits, the access log, the log, and the forwarding headers. A reload
// that changes none of them swaps routes and upstreams, and the TLS
// settings (certificates, min_version, client_auth, acme) of the
// listeners, in the running server; one that changes any starts a new
// server beside it (see sluice run).
func ServerChanged(old, new *Config) []string {
	var diff []string
	for _, c := range []struct {
		name string
		a, b any
	}{
		{"listen", listenShape(old.Listen), listenShape(new.Listen)},
		{"timeouts", old.Timeouts, new.Timeouts},
		{"limits", serverLimits(old.Limits), serverLimits(new.Limits)},
		{"access_log", old.AccessLog, new.AccessLog},
		{"log", old.Log, new.Log},
		{"forwarded", old.Forwarded, new.Forwarded},
	} {
		if !reflect.DeepEqual(c.a, c.b) {
			diff = append(diff, c.name)
		}
	}
	return diff
}

// serverLimits is what of the limits the server holds: all but the bound
// of the pool every server shares, which a reload sets on the pool.
func serverLimits(l Limits) Limits {
	l.MaxIdleUpstreamConns = 0
	return l
}

// listenShape is what of the listeners the server holds: all but their
// TLS settings, which a reload swaps in place.
func listenShape(ls []Listener) []Listener {
	shape := make([]Listener, len(ls))
	for i, l := range ls {
		shape[i] = Listener{Address: l.Address, RedirectHTTPS: l.RedirectHTTPS, HTTPSPort: l.HTTPSPort, Protocols: l.Protocols,
			EarlyData: l.EarlyData}
		if l.TLS != nil {
			shape[i].TLS = &ListenerTLS{}
		}
	}
	return shape
}

// Close stops the background work and waits for it: the upstreams', and
// the ACME managers' that a later generation did not take over (see
// acme.Manager.Stop). The idempotency layers' claims still live are not
// cut short: their requests renew and end them, and the layers' Redis
// client is closed after the last (see closeIdempotency).
func (g *Generation) Close() {
	for _, u := range g.Upstreams {
		u.Balancer().Close()
	}
	for _, s := range g.acme {
		if s.m != nil {
			s.m.Stop()
		}
	}
	if g.redis != nil {
		// Requests of this generation still in flight that ask Redis now
		// fail, and follow their route's on_store_error.
		g.redis.Close()
	}
	g.closeIdempotency()
	g.closeStores()
	if g.fleetRedis != nil {
		g.fleetRedis.Close()
	}
}

// RateLimits reports each route's rate limit decisions, for metrics: the
// route's name (its host and path prefix) and its counts.
func (g *Generation) RateLimits(report func(route string, c ratelimit.Counts)) {
	for name, l := range g.limiters {
		report(name, l.Counts())
	}
}

// ACME returns the ACME managers of g, one for each distinct acme section.
func (g *Generation) ACME() []*acme.Manager {
	var ms []*acme.Manager
	for _, s := range g.acme {
		if s.m != nil {
			ms = append(ms, s.m)
		}
	}
	return ms
}

// Servers reports every server of every upstream with its health, for
// metrics.
func (g *Generation) Servers(report func(upstream string, s *balance.Server)) {
	for name, u := range g.Upstreams {
		for _, s := range u.Balancer().Servers() {
			report(name, s)
		}
	}
}

// Build turns a validated Config into a Generation, reading the TLS
// listeners' certificate, key and CA files and checking their ACME storage
// directories: a file that cannot be used, or a directory that cannot be
// written to or made, is an *Error naming it, its key in the file and why.
// The balancers log health changes, and the ACME managers what they do,
// to slog.Default(). Call Start to run the balancers' background work
// (active health checks, DNS re-resolution), and Listeners.StartACME the
// ACME managers'; nothing runs before.
func Build(cfg *Config) (_ *Generation, err error) {
	log := slog.Default()
	g := &Generation{Config: cfg, Upstreams: make(map[string]*upstream.Group)}
	defer func() {
		if err != nil && g.redis != nil {
			g.redis.Close() // made for a rate limit of a route before the one that failed
		}
		if err != nil && g.idemRedis != nil {
			g.idemRedis.Close() // likewise, for an idempotency layer
		}
		if err != nil && g.fleetRedis != nil {
			g.fleetRedis.Close()
		}
	}()
	if err := g.buildTLS(log); err != nil {
		return nil, err
	}
	if f := cfg.Admin.TokenFile; f != "" {
		if g.AdminToken, err = readToken(f); err != nil {
			return nil, fmt.Errorf("%s: admin.token_file: %w", cfg.File, err)
		}
	}
	for _, u := range cfg.Upstreams {
		built, err := buildUpstream(cfg, u, log)
		if err != nil {
			return nil, err
		}
		g.Upstreams[u.Name] = built
	}
	g.buildCaches(cfg)
	if len(g.stores) > 0 && cfg.Redis != nil {
		// Purges reach every sluice sharing the server.
		g.fleetRedis = ratelimit.NewRedisClient(cfg.Redis.Address, cfg.Redis.Password, cfg.Redis.DB, time.Second)
		g.fleet = cache.NewFleet(g.fleetRedis, g.purgeLocal, log)
	}
	routes := make([]route.Route, 0, len(cfg.Routes))
	for _, r := range cfg.Routes {
		rt := route.Route{Host: r.Host, PathPrefix: r.PathPrefix, Path: r.Path, PathRegex: r.pathRegex, Name: r.Upstream}
		if r.Static == nil && r.Respond == nil {
			u := g.Upstreams[r.Upstream]
			if u == nil {
				return nil, fmt.Errorf("%s:%d: route to unknown upstream %q", cfg.File, r.Line, r.Upstream)
			}
			rt.Upstream = u
		}
		phases, err := routePhases(&r)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: route: %w", cfg.File, r.Line, err)
		}
		rt.Phases = phases
		if r.RateLimit != nil {
			// After the access lists: a client refused spends no budget.
			rt.Phases = append(rt.Phases, g.rateLimiter(cfg, r))
		}
		if ba := r.BasicAuth; ba != nil {
			// After the access lists and the rate limit: a flood of
			// guesses spends its budget, not a bcrypt check each.
			p, err := auth.NewBasic(ba.users, ba.Realm, ba.ForwardAuthorization)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: route %w", cfg.File, ba.Line, err)
			}
			rt.Phases = append(rt.Phases, p)
		}
		if fa := r.ForwardAuth; fa != nil {
			p, err := forwardAuthPhase(fa)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: route %w", cfg.File, fa.Line, err)
			}
			rt.Phases = append(rt.Phases, p)
		}
		if r.Idempotency != nil {
			l, err := g.idempotencyLayer(cfg, r)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: route idempotency: %w", cfg.File, r.Idempotency.Line, err)
			}
			rt.Phases = append(rt.Phases, l.Phase())
		}
		if r.Cache != nil {
			// After the phases that refuse requests (access, rate limit,
			// authentication): a stored response answers only a request
			// they let through.
			c, err := g.routeCache(r)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: route cache: %w", cfg.File, r.Cache.Line, err)
			}
			rt.Phases = append(rt.Phases, c)
		}
		if r.Compress != nil {
			p, err := buildCompress(r.Compress)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: route compress: %w", cfg.File, r.Line, err)
			}
			rt.Phases = append(rt.Phases, p)
		}
		pages, err := errorPagesPhase(r.Errors, cfg.Errors)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: route errors: %w", cfg.File, r.Line, err)
		}
		if pages != nil {
			rt.Phases = append(rt.Phases, pages)
		}
		if r.Respond != nil {
			// The route's own answer to every request: last, after the
			// phases that may refuse a request.
			p, err := respondPhase(r.Respond, r.pathRegex)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: route respond: %w", cfg.File, r.Respond.Line, err)
			}
			rt.Name = "respond"
			rt.Phases = append(rt.Phases, p)
		}
		if r.Static != nil {
			// Files answer every request of the route: the phase goes
			// last, after those that may refuse or rewrite a request.
			// Its directory stays open until the generation is garbage
			// collected (os.Root closes itself then), not at Close: a
			// request of the old generation may still be served after a
			// reload.
			files, err := static.New(static.Options{Root: r.Static.Root, Prefix: r.PathPrefix,
				Index: r.Static.Index, Hidden: r.Static.Dotfiles, CacheControl: r.Static.CacheControl})
			if err != nil {
				return nil, fmt.Errorf("%s:%d: route: %w", cfg.File, r.Static.Line, err)
			}
			rt.Name = "static"
			rt.Phases = append(rt.Phases, files)
		}
		routes = append(routes, rt)
	}
	g.Table = route.New(routes...)
	if len(cfg.Errors) > 0 {
		pages, err := errorPagesPhase(nil, cfg.Errors)
		if err != nil {
			return nil, fmt.Errorf("%s: errors: %w", cfg.File, err)
		}
		g.Table = g.Table.WithUnmatched(pages)
	}
	return g, nil
}

// routeName names a route for rate limit metrics, logs and Redis keys:
// its host ("*" for any) followed by its path condition, such as
// "api.example.com/v1/", "*/api/" or "*=/login", as the access log names
// routes (route.Route.Label). A fleet of sluice instances with the same
// routes names them alike.
func routeName(r Route) string {
	return (&route.Route{Host: r.Host, PathPrefix: r.PathPrefix, Path: r.Path, PathRegex: r.pathRegex}).Label()
}

// rateLimiter builds the rate limit phase of route r, and g's Redis client
// when it is the first route to need it.
func (g *Generation) rateLimiter(cfg *Config, r Route) *ratelimit.Limiter {
	rl := r.RateLimit
	name := routeName(r)
	key, _ := ratelimit.ParseKey(rl.Key) // validated by Parse
	l := &ratelimit.Limiter{
		Name:   name,
		Policy: ratelimit.Policy{Rate: rl.Rate, Burst: int64(rl.Burst)},
		Key:    key,
	}
	if rl.OnStoreError == "deny" {
		l.OnStoreError = ratelimit.Deny
	}
	if rl.Store == "redis" {
		if g.redis == nil {
			// One client for every route, its own timeouts the longest
			// of theirs; each route's store bounds its own requests.
			longest := time.Duration(0)
			for _, o := range cfg.Routes {
				if o.RateLimit != nil && o.RateLimit.Store == "redis" {
					longest = max(longest, o.RateLimit.StoreTimeout)
				}
			}
			g.redis = ratelimit.NewRedisClient(cfg.Redis.Address, cfg.Redis.Password, cfg.Redis.DB, longest)
		}
		l.Store = &ratelimit.Redis{Client: g.redis, Prefix: "sluice:ratelimit:" + name + ":", Timeout: rl.StoreTimeout}
	} else {
		l.Store = ratelimit.NewLocal(0)
	}
	if g.limiters == nil {
		g.limiters = make(map[string]*ratelimit.Limiter)
	}
	if _, dup := g.limiters[name]; !dup { // a later route of the same name is never matched
		g.limiters[name] = l
	}
	return l
}

func buildUpstream(cfg *Config, u *Upstream, log *slog.Logger) (*upstream.Group, error) {
	pol, err := Policy(u.Retry)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: upstream %s: %w", cfg.File, u.Line, u.Name, err)
	}
	newPolicy, err := balance.ParsePolicy(u.Balance)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: upstream %s: %w", cfg.File, u.Line, u.Name, err)
	}
	maxIdle := u.Pool.MaxIdle
	if cfg.Limits.MaxIdleUpstreamConns == 0 {
		maxIdle = 0
	}
	once, err := pool.ParseOnceMode(u.Pool.NonIdempotent)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: upstream %s: pool.non_idempotent %w", cfg.File, u.Line, u.Name, err)
	}
	opts := &proxy.PeerOptions{
		ConnectTimeout:        u.Timeouts.Connect,
		ResponseHeaderTimeout: u.Timeouts.ResponseHeader,
		ReadTimeout:           u.Timeouts.Read,
		WriteTimeout:          u.Timeouts.Write,
		Pool: &pool.Limits{
			MaxIdle:     maxIdle,
			IdleTimeout: u.Pool.IdleTimeout,
			MaxRequests: u.Pool.MaxRequests,
			MaxAge:      u.Pool.MaxAge,
			Once:        pool.Once{Mode: once, MaxIdle: u.Pool.NonIdempotentMaxIdle},
		},
		Retry:    pol,
		Protocol: u.Protocol,
		Host:     u.Host,
	}
	if u.TLS != nil {
		t, err := clientTLS(u.TLS)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: upstream %s: %w", cfg.File, u.TLS.Line, u.Name, err)
		}
		opts.TLS = t
	}
	var servers []*balance.Server
	for _, s := range u.Servers {
		servers = append(servers, &balance.Server{
			Addr: s.Address, Name: s.Address, Weight: s.Weight, Backup: s.Backup, ResolveInterval: s.Resolve,
		})
	}
	var hashKey balance.HashKey
	if u.Balance == "hash" {
		if hashKey, err = balance.ParseHashKey(u.HashKey); err != nil {
			return nil, fmt.Errorf("%s:%d: upstream %s: %w", cfg.File, u.Line, u.Name, err)
		}
	}
	health := u.Health
	health.Log = log
	g := upstream.New(u.Name, servers, newPolicy(), health, opts)
	g.SetHashKey(hashKey)
	return g, nil
}

// clientTLS turns the tls section of an upstream into the proxy's TLS
// settings, reading its files: the CA's certificates, the client
// certificate and its key. An error names the key, the file and what is
// wrong with it.
//
// The settings' ID, which keys the upstream's pooled connections, is a
// digest of what they verify with and present: the server name, whether
// verification is off, the CA file's contents and the client certificate.
// Upstreams with equal settings share connections to a server they share,
// and a reload that changes none of them keeps the pooled connections,
// while a new CA or certificate file starts new ones.
func clientTLS(t *UpstreamTLS) (*proxy.TLS, error) {
	cfg := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	id := sha256.New()
	fmt.Fprintf(id, "server_name=%q insecure_skip_verify=%v\n", t.ServerName, t.InsecureSkipVerify)
	if t.CA != "" {
		data, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("tls.ca: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("tls.ca %s: no PEM certificate in the file", t.CA)
		}
		cfg.RootCAs = roots
		fmt.Fprintf(id, "ca %d\n", len(data))
		id.Write(data)
	}
	if t.Cert != "" {
		certPEM, err := os.ReadFile(t.Cert)
		if err != nil {
			return nil, fmt.Errorf("tls.cert: %w", err)
		}
		keyPEM, err := os.ReadFile(t.Key)
		if err != nil {
			return nil, fmt.Errorf("tls.key: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("tls.cert %s and tls.key %s: %w", t.Cert, t.Key, err)
		}
		// Presented whatever authorities the server names: crypto/tls
		// would otherwise send no certificate to a server whose list
		// leaves its issuer out, and the server would say one is
		// missing rather than refused.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
		for _, der := range pair.Certificate {
			fmt.Fprintf(id, "cert %d\n", len(der))
			id.Write(der)
		}
	}
	return &proxy.TLS{Config: cfg, ID: hex.EncodeToString(id.Sum(nil)[:12])}, nil
}

// Policy turns the retry section of an upstream into a retry.Policy with
// its own budget.
func Policy(r Retry) (*retry.Policy, error) {
	on, err := retry.ParseConditions(r.On)
	if err != nil {
		return nil, err
	}
	mode, err := retry.ParseNonIdempotent(r.NonIdempotent)
	if err != nil {
		return nil, err
	}
	tries := r.Tries
	if on == 0 {
		tries = 1 // retry.on: [] turns retries off
	}
	buf := r.BodyBuffer
	if buf == 0 {
		buf = -1 // body_buffer: 0 keeps nothing
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = -1 // timeout: 0s means no bound
	}
	return &retry.Policy{
		Tries:             tries,
		On:                on,
		NonIdempotent:     mode,
		IdempotencyHeader: r.IdempotencyHeader,
		Timeout:           timeout,
		Backoff:           retry.Backoff{Base: r.Backoff.Base, Max: r.Backoff.Max},
		Budget:            retry.NewBudget(r.Budget.Ratio, r.Budget.MinPerSecond, nil),
		BodyBuffer:        buf,
	}, nil
}

// NewServer returns a proxy server configured by cfg and serving g, and
// the resources it opened for it: its connection pool and access log,
// which Resources.Close closes after the server's Shutdown.
func NewServer(cfg *Config, g *Generation, errorLog *slog.Logger) (*proxy.Server, *Resources, error) {
	return NewServerPool(cfg, g, errorLog, nil)
}

// NewServerPool is NewServer with the connection pool p, when not nil,
// instead of a new one: the server a reload starts beside the running one
// shares its pool, which the new server's Resources.Close leaves open.
func NewServerPool(cfg *Config, g *Generation, errorLog *slog.Logger, p *pool.Pool) (*proxy.Server, *Resources, error) {
	res := &Resources{pool: p}
	if p == nil {
		p = pool.New(cfg.Limits.PoolBound(), nil)
		res.pool = p
		res.ownPool = true
	}
	srv := &proxy.Server{
		Handler:           g.Table,
		HeaderTimeout:     cfg.Timeouts.Header,
		IdleTimeout:       cfg.Timeouts.Idle,
		BodyTimeout:       cfg.Timeouts.Body,
		SendTimeout:       cfg.Timeouts.Send,
		StreamIdleTimeout: cfg.Timeouts.StreamIdle,
		MaxHeaderBytes:    int(cfg.Limits.MaxHeaderBytes),
		MaxHeaders:        cfg.Limits.MaxHeaders,
		H2: h2.Settings{
			MaxConcurrentStreams: uint32(cfg.Limits.H2.MaxConcurrentStreams),
			InitialWindow:        uint32(cfg.Limits.H2.InitialWindow),
			MaxHeaderList:        uint32(cfg.Limits.H2.MaxHeaderList),
		},
		H3: cfg.Limits.H3.settings(),
		Forwarding: proxy.Forwarding{
			NoXForwardedFor:   !cfg.Forwarded.XForwardedFor,
			NoXForwardedProto: !cfg.Forwarded.XForwardedProto,
			NoXForwardedHost:  !cfg.Forwarded.XForwardedHost,
			NoRequestID:       !cfg.Forwarded.RequestID,
			NoVia:             !cfg.Forwarded.Via,
			Trusted:           cfg.Forwarded.Trusted,
			TrustUnix:         cfg.Forwarded.TrustUnix,
			ClientFromXFF:     cfg.Forwarded.ClientIP == "x_forwarded_for",
		},
		Pool:     p,
		ErrorLog: errorLog,
	}
	if cfg.AccessLog.Enabled {
		h, err := accessHandler(cfg.AccessLog)
		if err != nil {
			if res.ownPool {
				p.Close()
			}
			return nil, nil, fmt.Errorf("access log: %w", err)
		}
		var w io.Writer = os.Stderr
		if cfg.AccessLog.Path != "" {
			f, err := openLogFile(cfg.AccessLog.Path)
			if err != nil {
				if res.ownPool {
					p.Close()
				}
				return nil, nil, fmt.Errorf("access log: %w", err)
			}
			w, res.file = f, f
		}
		res.log = logbuf.New(w, int(cfg.AccessLog.Buffer), cfg.AccessLog.Flush)
		srv.AccessLog = slog.New(h(res.log))
	}
	return srv, res, nil
}

// accessHandler returns what makes the access log's handler for a writer:
// slog's text or JSON handler, or one writing a's format of fields
// (parsed when the config was, or now for a Config made otherwise).
func accessHandler(a AccessLog) (func(io.Writer) slog.Handler, error) {
	f := a.template
	if f == nil && a.Format != "text" && a.Format != "json" && a.Format != "" {
		text, named := accesslog.Named(a.Format)
		if !named {
			text = a.Format
		}
		var err error
		if f, err = accesslog.Parse(text); err != nil {
			return nil, fmt.Errorf("format: %w", err)
		}
	}
	if f != nil {
		return func(w io.Writer) slog.Handler { return accesslog.NewHandler(w, f, slog.LevelInfo) }, nil
	}
	return func(w io.Writer) slog.Handler { return Handler(w, a.Format, slog.LevelInfo) }, nil
}

// Handler returns a slog handler writing format ("text" or "json") to w.
func Handler(w io.Writer, format string, level slog.Level) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// Level parses a log level name.
func Level(name string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(name)); err != nil {
		return slog.LevelInfo
	}
	return l
}

// buildCompress makes a route's compression phase.
func buildCompress(c *Compress) (*compress.Phase, error) {
	opts := compress.Options{MinSize: c.MinSize, Types: c.Types,
		ZstdLevel: c.Level.Zstd, BrotliLevel: c.Level.Brotli, GzipLevel: c.Level.Gzip}
	for _, name := range c.Algorithms {
		alg, ok := compress.ParseAlgorithm(name)
		if !ok {
			return nil, fmt.Errorf("unknown algorithm %q", name)
		}
		opts.Algorithms = append(opts.Algorithms, alg)
	}
	return compress.New(opts)
}

// minToken is the shortest admin token taken: one a person would type
// from memory is guessed too soon.
const minToken = 16

// readToken reads the admin token from file: its contents, surrounding
// whitespace (a final newline) trimmed.
func readToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if len(t) < minToken {
		return "", fmt.Errorf("%s: the token is %d bytes, want at least %d (openssl rand -hex 32 makes one)", file, len(t), minToken)
	}
	return t, nil
}
