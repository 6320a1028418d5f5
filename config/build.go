package config

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/retry"
	"github.com/sluice-proxy/sluice/route"
)

// Generation is the running form of one Config: the routing table with its
// upstream groups, each with its peers, connection options and retry
// policy. It is immutable once built, so that a reload can build the next
// generation beside it and swap the proxy's handler without dropping a
// connection (proxy.Server.SetHandler).
type Generation struct {
	Config    *Config
	Table     *route.Table
	Upstreams map[string]*Upstreamer
}

// Upstreamer is one built upstream: its peers, their shared options and the
// way a peer is picked for each try.
type Upstreamer struct {
	Name    string
	Options *proxy.PeerOptions
	Peers   []*proxy.Peer
	next    atomic.Uint64
}

// Pick returns the next peer in turn, skipping peers that already failed
// this request while one that has not is left; when all have failed, the
// turn goes on among them (a single-server upstream retries its server).
func (u *Upstreamer) Pick(s *proxy.Session) (*proxy.Peer, error) {
	n := uint64(len(u.Peers))
	if n == 0 {
		return nil, &fault.Error{Kind: fault.NoUpstream, Source: fault.Internally, Context: "upstream " + u.Name + " has no servers"}
	}
	start := u.next.Add(1)
	for i := uint64(0); i < n; i++ {
		p := u.Peers[(start+i)%n]
		if !s.Tried(p.Addr) {
			return p, nil
		}
	}
	return u.Peers[start%n], nil
}

// Build turns a validated Config into a Generation.
func Build(cfg *Config) (*Generation, error) {
	g := &Generation{Config: cfg, Upstreams: make(map[string]*Upstreamer)}
	for _, u := range cfg.Upstreams {
		built, err := buildUpstream(cfg, u)
		if err != nil {
			return nil, err
		}
		g.Upstreams[u.Name] = built
	}
	routes := make([]route.Route, 0, len(cfg.Routes))
	for _, r := range cfg.Routes {
		u := g.Upstreams[r.Upstream]
		if u == nil {
			return nil, fmt.Errorf("%s:%d: route to unknown upstream %q", cfg.File, r.Line, r.Upstream)
		}
		routes = append(routes, route.Route{Host: r.Host, PathPrefix: r.PathPrefix, Name: r.Upstream, Upstream: u})
	}
	g.Table = route.New(routes...)
	return g, nil
}

func buildUpstream(cfg *Config, u *Upstream) (*Upstreamer, error) {
	pol, err := Policy(u.Retry)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: upstream %s: %w", cfg.File, u.Line, u.Name, err)
	}
	maxIdle := u.Pool.MaxIdle
	if cfg.Limits.MaxIdleUpstreamConns == 0 {
		maxIdle = 0
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
		},
		NonIdempotentMaxIdle: nonIdempotentMaxIdle(u.Pool.NonIdempotentMaxIdle),
		Retry:                pol,
	}
	b := &Upstreamer{Name: u.Name, Options: opts}
	for _, s := range u.Servers {
		for i := 0; i < max(1, s.Weight); i++ {
			// Until weighted balancing lands, a weight repeats the
			// server in the turn.
			b.Peers = append(b.Peers, &proxy.Peer{Addr: s.Address, Upstream: u.Name, Options: opts})
		}
	}
	return b, nil
}

// nonIdempotentMaxIdle maps the config's 0 ("always dial") to the proxy's
// negative value for the same.
func nonIdempotentMaxIdle(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
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
	return &retry.Policy{
		Tries:             tries,
		On:                on,
		NonIdempotent:     mode,
		IdempotencyHeader: r.IdempotencyHeader,
		Timeout:           r.Timeout,
		Backoff:           retry.Backoff{Base: r.Backoff.Base, Max: r.Backoff.Max},
		Budget:            retry.NewBudget(r.Budget.Ratio, r.Budget.MinPerSecond, nil),
		BodyBuffer:        buf,
	}, nil
}

// NewServer returns a proxy server configured by cfg and serving g. The
// returned closer closes the access log file, if any.
func NewServer(cfg *Config, g *Generation, errorLog *slog.Logger) (*proxy.Server, io.Closer, error) {
	srv := &proxy.Server{
		Handler:        g.Table,
		HeaderTimeout:  cfg.Timeouts.Header,
		IdleTimeout:    cfg.Timeouts.Idle,
		BodyTimeout:    cfg.Timeouts.Body,
		SendTimeout:    cfg.Timeouts.Send,
		MaxHeaderBytes: int(cfg.Limits.MaxHeaderBytes),
		MaxHeaders:     cfg.Limits.MaxHeaders,
		Forwarding: proxy.Forwarding{
			NoXForwardedFor:   !cfg.Forwarded.XForwardedFor,
			NoXForwardedProto: !cfg.Forwarded.XForwardedProto,
			NoXForwardedHost:  !cfg.Forwarded.XForwardedHost,
			NoVia:             !cfg.Forwarded.Via,
		},
		Pool:     pool.New(max(1, cfg.Limits.MaxIdleUpstreamConns), nil),
		ErrorLog: errorLog,
	}
	var closer io.Closer = nopCloser{}
	if cfg.AccessLog.Enabled {
		var w io.Writer = os.Stderr
		if cfg.AccessLog.Path != "" {
			f, err := os.OpenFile(cfg.AccessLog.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				srv.Pool.Close()
				return nil, nil, fmt.Errorf("access log: %w", err)
			}
			w, closer = f, f
		}
		srv.AccessLog = slog.New(Handler(w, cfg.AccessLog.Format, slog.LevelInfo))
	}
	return srv, closer, nil
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

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
