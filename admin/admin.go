// Package admin serves sluice's admin listener over net/http: liveness
// and readiness for orchestrators, the Prometheus metrics, the running
// config with its secrets redacted, the state of every upstream server
// with drain and enable (as HAProxy's admin socket has), the live status
// page, and optionally Go's profiler.
//
//	GET  /live                                   200 while the process serves
//	GET  /ready                                  200, or 503 with the reasons as JSON
//	GET  /metrics                                Prometheus text format
//	GET  /status                                 the live status page (HTML, embedded assets)
//	GET  /api/config                             the running config as JSON, secrets redacted
//	GET  /api/upstreams                          every upstream server, its health and statistics
//	POST /api/upstreams/NAME/servers/ADDR/drain  take a server out of selection by hand
//	POST /api/upstreams/NAME/servers/ADDR/enable put it back
//	POST /api/cache/purge                        remove stored responses by URL, prefix and tag, fleet-wide
//	GET  /debug/pprof/                           Go's profiler, with Handler's pprof set
//
// ADDR is the server's address as written in the config, percent-encoded
// as one path segment (unix:/run/app.sock is unix:%2Frun%2Fapp.sock). The
// admin listener is not on the proxy's data path: it may use net/http and
// allocate freely; what it reads from the proxy is kept by the proxy at no
// cost (atomics) or read under the proxy's locks at request time.
package admin

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/observe"
	"github.com/sluice-proxy/sluice/pool"
)

// Server is the admin listener's state and handlers. Set the exported
// fields before Handler is called and do not change them afterwards, but
// for Pprof (see there); the methods are safe for concurrent use. One
// Server may serve on more than one listener at a time (Listen), so that a
// reload can move it from one address to another without a gap.
type Server struct {
	// Generation returns the generation of routes and upstreams the proxy
	// serves now (a reload swaps it); nil means none is loaded yet.
	Generation func() *config.Generation
	// Proxy is the proxy server (a *proxy.Server, or what stands for the
	// one serving now when a reload may replace it), for its connections;
	// nil leaves them out.
	Proxy Proxy
	// Pool is the proxy's pool of upstream connections, for each server's
	// idle connections; nil leaves them out.
	Pool *pool.Pool
	// Metrics are served at /metrics; nil serves 404 there.
	Metrics *observe.Metrics
	// Recorder holds each server's recent statistics; nil shows none.
	Recorder *observe.Recorder
	// Pprof serves Go's profiler at /debug/pprof/. Handler (and so
	// Listen) reads it: a change applies to the handlers made after it, and
	// must not race with their making.
	Pprof bool
	// Log receives drains and enables; nil means slog.Default().
	Log *slog.Logger

	listening atomic.Bool
	token     atomic.Pointer[[32]byte] // SHA-256 of the token asked for (SetToken)

	mu       sync.Mutex
	hash     string
	loadedAt time.Time
}

// SetListening records whether the proxy's listeners are open and
// serving, for /ready: set it once they all are, clear it when shutdown
// begins.
func (a *Server) SetListening(open bool) { a.listening.Store(open) }

// SetConfig records the hash and load time of the config now running,
// for /api/upstreams and the status page.
func (a *Server) SetConfig(hash string, at time.Time) {
	a.mu.Lock()
	a.hash, a.loadedAt = hash, at
	a.mu.Unlock()
}

func (a *Server) configInfo() (string, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hash, a.loadedAt
}

func (a *Server) log() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.Default()
}

func (a *Server) generation() *config.Generation {
	if a.Generation == nil {
		return nil
	}
	return a.Generation()
}

// Handler returns the admin endpoints.
func (a *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"live": true})
	})
	mux.HandleFunc("GET /ready", a.ready)
	if a.Metrics != nil {
		mux.Handle("GET /metrics", a.Metrics.Handler())
	}
	mux.HandleFunc("GET /api/config", a.config)
	mux.HandleFunc("GET /api/upstreams", a.upstreams)
	// Without a method, so that a GET gets 405 from serverAction rather
	// than the JSON 404 of /api/.
	mux.HandleFunc("/api/upstreams/{upstream}/servers/{server}/{action}", a.serverAction)
	mux.HandleFunc("/api/cache/purge", a.purge)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	})
	mux.HandleFunc("GET /status", a.statusPage)
	mux.Handle("GET /status/", a.assets())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/status", http.StatusFound)
	})
	if a.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return a.guard(mux)
}

// Listen serves the admin endpoints on addr until stop is called; stop
// closes the listener and the connections open on it.
func (a *Server) Listen(addr string) (bound net.Addr, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	return ln.Addr(), a.Serve(ln), nil
}

// Serve is Listen on a listener of the caller's (one a binary upgrade
// handed over, say); stop closes it.
func (a *Server) Serve(ln net.Listener) (stop func()) {
	hs := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log().Error("admin listener", "error", err)
		}
	}()
	return func() { hs.Close(); <-done }
}

// Proxy is what the admin listener reads of the proxy server;
// *proxy.Server has it.
type Proxy interface {
	Draining() bool
	Connections(report func(listener, protocol string))
	InFlight() int64
}

// ready answers 200 when the listeners are open (and not shutting down), a
// config is loaded and every upstream a route sends to has a server that
// takes requests (healthy and not drained), and 503 with the reasons
// otherwise.
func (a *Server) ready(w http.ResponseWriter, r *http.Request) {
	var reasons []string
	switch {
	case a.Proxy != nil && a.Proxy.Draining():
		reasons = append(reasons, "shutting down")
	case !a.listening.Load():
		reasons = append(reasons, "listeners not open")
	}
	gen := a.generation()
	if gen == nil {
		reasons = append(reasons, "no config loaded")
	} else {
		reasons = append(reasons, upstreamsNotReady(gen)...)
	}
	if len(reasons) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reasons": reasons})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true})
}

// writeJSON answers with v as indented JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// writeError answers with {"error": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
