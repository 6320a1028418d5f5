// Package observe turns what the proxy does into Prometheus metrics. A
// Metrics value is a proxy.Observer and a collector of pool statistics,
// registered in its own registry (never the global one).
package observe

import (
	"crypto/tls"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
)

// Metrics counts requests, tries, retries and pool events. Its methods are
// safe for concurrent use and allocate nothing once an upstream's series
// exist.
type Metrics struct {
	reg *prometheus.Registry

	requests  *prometheus.CounterVec   // upstream, code
	duration  *prometheus.HistogramVec // upstream
	tries     *prometheus.CounterVec   // upstream, outcome
	retries   *prometheus.CounterVec   // upstream, reason
	given     *prometheus.CounterVec   // upstream, reason: a failed try not retried
	denied    *prometheus.CounterVec   // upstream
	stale     *prometheus.CounterVec   // upstream
	aborted   *prometheus.CounterVec   // upstream
	faults    *prometheus.CounterVec   // stage, kind: client faults
	exhausted *prometheus.CounterVec   // resource, op: sluice out of descriptors, memory or ports
	handshake *prometheus.CounterVec   // version, resumed: TLS handshakes completed
	tlsFailed *prometheus.CounterVec   // reason: TLS handshakes failed

	// The TLS series made up front: handshakes of TLS 1.2 and 1.3, full
	// and resumed, and failures by reason.
	handshakes  [2][2]prometheus.Counter
	tlsFailures []prometheus.Counter

	// The client-fault series of the kinds a client causes, by stage.
	faultSeries [3][3]prometheus.Counter

	mu    sync.Mutex
	byUp  sync.Map // upstream name -> *series
	codes [600]string

	rec atomic.Pointer[Recorder] // told of every try too, when set (Record)

	reloads    *prometheus.CounterVec // result
	reloadsOK  prometheus.Counter
	reloadsBad prometheus.Counter
	loadedAt   prometheus.Gauge
	hash       atomic.Pointer[string] // the running config's hash, for sluice_config_info
}

// series caches one upstream's children so the hot path skips label
// lookups.
type series struct {
	duration prometheus.Observer
	denied   prometheus.Counter
	stale    prometheus.Counter
	aborted  prometheus.Counter
	requests sync.Map // code string -> prometheus.Counter
	tries    sync.Map // outcome -> prometheus.Counter
	retries  sync.Map
	given    sync.Map
}

// New returns Metrics that also report the pool's counters.
func New(p *pool.Pool) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	for i := range m.codes {
		m.codes[i] = strconv.Itoa(i)
	}
	ups := []string{"upstream"}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_requests_total", Help: "Requests answered, by upstream and status sent to the client (0: none sent).",
	}, []string{"upstream", "code"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sluice_request_duration_seconds", Help: "Time from the request head to the end of the response.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, ups)
	m.tries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_upstream_tries_total", Help: "Tries sent to upstreams, by outcome: ok, or the failure kind.",
	}, []string{"upstream", "outcome"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_retries_total", Help: "Failed tries followed by another try, by the failure kind.",
	}, []string{"upstream", "reason"})
	m.given = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_not_retried_total", Help: "Failed tries not followed by another, by the failure kind.",
	}, []string{"upstream", "reason"})
	m.denied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_retry_budget_denied_total", Help: "Retries refused by the retry budget.",
	}, ups)
	m.stale = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_stale_resends_total", Help: "Tries that followed a pooled connection found dead at send time.",
	}, ups)
	m.aborted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_responses_aborted_total", Help: "Responses cut after they had started (upstream or client failed mid-body).",
	}, ups)
	m.faults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_client_faults_total",
		Help: "Client faults, by stage (head, body, response) and kind: client_timeout (a head past timeouts.header: 408; a stalled body or reader), client_closed (gone or reset mid-request), bad_request (broke HTTP/1.1).",
	}, []string{"stage", "kind"})
	for st := range m.faultSeries {
		for k, kind := range clientKinds {
			m.faultSeries[st][k] = m.faults.WithLabelValues(proxy.ClientStage(st).String(), kind.String())
		}
	}
	m.exhausted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_local_exhaustion_total",
		Help: "Failures for want of a local resource (descriptors, memory, ports), by resource and op: " +
			"upstream, a try that could not reach its upstream (answered 503, not retried, no server's fault); " +
			"accept, a waiting client answered 503 at accept and closed, its request unread.",
	}, []string{"resource", "op"})
	m.handshake = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_tls_handshakes_total",
		Help: "TLS handshakes completed on TLS listeners, by version (1.2, 1.3) and whether the session was resumed (true, false).",
	}, []string{"version", "resumed"})
	for v, version := range []string{"1.2", "1.3"} {
		for r, resumed := range []string{"false", "true"} {
			m.handshakes[v][r] = m.handshake.WithLabelValues(version, resumed)
		}
	}
	m.tlsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_tls_handshake_failures_total",
		Help: "TLS handshakes that failed, by reason: timeout (not done within timeouts.header), closed (the client left), " +
			"plain_http (answered 400), not_tls, version (only older versions offered), alpn (no protocol in common), " +
			"client_cert (a client certificate that did not verify), client_alert (the client refused, most often sluice's certificate), other.",
	}, []string{"reason"})
	for _, f := range proxy.HandshakeFailures() {
		m.tlsFailures = append(m.tlsFailures, m.tlsFailed.WithLabelValues(f.String()))
	}
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_config_reloads_total",
		Help: "Config reloads (SIGHUP), by result: success, or failure (the previous config kept serving).",
	}, []string{"result"})
	m.reloadsOK, m.reloadsBad = m.reloads.WithLabelValues("success"), m.reloads.WithLabelValues("failure")
	m.loadedAt = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_config_load_timestamp_seconds", Help: "When the running config was loaded, in Unix seconds.",
	})
	m.reg.MustRegister(m.requests, m.duration, m.tries, m.retries, m.given, m.denied, m.stale, m.aborted, m.faults, m.exhausted,
		m.handshake, m.tlsFailed, m.reloads, m.loadedAt, configCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if p != nil {
		m.reg.MustRegister(poolCollector{p})
	}
	return m
}

// Record has every try told to r as well, for the admin's status page;
// nil stops it. It may be called while the Metrics are in use (a reload
// that turns the admin listener on or off).
func (m *Metrics) Record(r *Recorder) { m.rec.Store(r) }

// ConfigLoaded records the config now running: its hash (of the file's
// bytes, say) and when it was loaded.
func (m *Metrics) ConfigLoaded(hash string, at time.Time) {
	m.hash.Store(&hash)
	m.loadedAt.Set(float64(at.UnixNano()) / 1e9)
}

// Reloaded counts a config reload: ok, or failed (err not nil).
func (m *Metrics) Reloaded(err error) {
	if err != nil {
		m.reloadsBad.Inc()
		return
	}
	m.reloadsOK.Inc()
}

// configCollector reports the running config's hash.
type configCollector struct{ m *Metrics }

var configDesc = prometheus.NewDesc("sluice_config_info",
	"1, labelled with the hash (SHA-256 of the file) of the config running.", []string{"hash"}, nil)

func (c configCollector) Describe(ch chan<- *prometheus.Desc) { ch <- configDesc }

func (c configCollector) Collect(ch chan<- prometheus.Metric) {
	if h := c.m.hash.Load(); h != nil {
		ch <- prometheus.MustNewConstMetric(configDesc, prometheus.GaugeValue, 1, *h)
	}
}

// ProxyState is what the metrics read of the proxy server at scrape time;
// *proxy.Server has it.
type ProxyState interface {
	Connections(report func(listener, protocol string))
	InFlight() int64
}

// WatchProxy reports srv's open client connections, by listener and
// protocol, and its requests in flight, at scrape time.
func (m *Metrics) WatchProxy(srv ProxyState) {
	m.reg.MustRegister(proxyCollector{srv})
}

type proxyCollector struct{ srv ProxyState }

var (
	connectionsDesc = prometheus.NewDesc("sluice_client_connections",
		"Open client connections, by listener address and protocol (http/1.1, h2, h3).", []string{"listener", "protocol"}, nil)
	inFlightDesc = prometheus.NewDesc("sluice_requests_in_flight",
		"Requests whose head was read and whose answer is not yet complete.", nil, nil)
)

func (c proxyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connectionsDesc
	ch <- inFlightDesc
}

func (c proxyCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ listener, protocol string }
	counts := map[key]int{}
	c.srv.Connections(func(listener, protocol string) { counts[key{listener, protocol}]++ })
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.GaugeValue, float64(n), k.listener, k.protocol)
	}
	ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(c.srv.InFlight()))
}

// ServerState is one upstream server's state, for the health gauges.
type ServerState struct {
	Upstream, Server string
	Healthy          bool
	// Drained is set for a server taken out by hand (the admin API).
	Drained     bool
	Outstanding int64
}

// WatchServers reports each server's health and outstanding tries at
// scrape time; list calls report once per server.
func (m *Metrics) WatchServers(list func(report func(ServerState))) {
	m.reg.MustRegister(serverCollector{list})
}

type serverCollector struct {
	list func(report func(ServerState))
}

var (
	healthyDesc = prometheus.NewDesc("sluice_upstream_server_healthy",
		"1 when the server takes requests (not down by passive or active health checks, not ejected), else 0.",
		[]string{"upstream", "server"}, nil)
	outstandingDesc = prometheus.NewDesc("sluice_upstream_server_outstanding",
		"Tries in flight to the server.", []string{"upstream", "server"}, nil)
	drainedDesc = prometheus.NewDesc("sluice_upstream_server_drained",
		"1 when the server is taken out by hand (admin API drain), else 0.", []string{"upstream", "server"}, nil)
)

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- healthyDesc
	ch <- outstandingDesc
	ch <- drainedDesc
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	c.list(func(s ServerState) {
		v := 0.0
		if s.Healthy {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, v, s.Upstream, s.Server)
		ch <- prometheus.MustNewConstMetric(outstandingDesc, prometheus.GaugeValue, float64(s.Outstanding), s.Upstream, s.Server)
		d := 0.0
		if s.Drained {
			d = 1
		}
		ch <- prometheus.MustNewConstMetric(drainedDesc, prometheus.GaugeValue, d, s.Upstream, s.Server)
	})
}

// RateLimitState is one route's rate limit decisions, for the
// sluice_rate_limit_total counter.
type RateLimitState struct {
	Route                        string
	Allowed, Limited, StoreError uint64
}

// WatchRateLimits reports each rate-limited route's decisions at scrape
// time, as sluice_rate_limit_total{route, result}: allowed, limited (answered
// 429) and store_error (Redis failed or was too slow; the request was let
// through or answered 503 as the route's on_store_error says). list calls
// report once per route.
func (m *Metrics) WatchRateLimits(list func(report func(RateLimitState))) {
	m.reg.MustRegister(rateLimitCollector{list})
}

type rateLimitCollector struct {
	list func(report func(RateLimitState))
}

var rateLimitDesc = prometheus.NewDesc("sluice_rate_limit_total",
	"Requests that a route's rate limit decided, by route (host and path prefix) and result: allowed, limited (429), store_error (Redis failed or too slow).",
	[]string{"route", "result"}, nil)

func (c rateLimitCollector) Describe(ch chan<- *prometheus.Desc) { ch <- rateLimitDesc }

func (c rateLimitCollector) Collect(ch chan<- prometheus.Metric) {
	c.list(func(s RateLimitState) {
		ch <- prometheus.MustNewConstMetric(rateLimitDesc, prometheus.CounterValue, float64(s.Allowed), s.Route, "allowed")
		ch <- prometheus.MustNewConstMetric(rateLimitDesc, prometheus.CounterValue, float64(s.Limited), s.Route, "limited")
		ch <- prometheus.MustNewConstMetric(rateLimitDesc, prometheus.CounterValue, float64(s.StoreError), s.Route, "store_error")
	})
}

// IdempotencyState is one route's idempotency layer's counts, for the
// sluice_idempotency_total counter: each result and its count.
type IdempotencyState struct {
	Route   string
	Results []IdempotencyResult
}

// IdempotencyResult is one result of an idempotency layer and how many
// times it happened.
type IdempotencyResult struct {
	Result string
	Count  uint64
}

// WatchIdempotency reports each route's idempotency layer's counts at
// scrape time, as sluice_idempotency_total{route, result}. list calls
// report once per route.
func (m *Metrics) WatchIdempotency(list func(report func(IdempotencyState))) {
	m.reg.MustRegister(idempotencyCollector{list})
}

type idempotencyCollector struct {
	list func(report func(IdempotencyState))
}

var idempotencyDesc = prometheus.NewDesc("sluice_idempotency_total",
	"What a route's idempotency layer did, by route (host and path prefix) and result: claimed (keys claimed, forwarded), retaken, replayed, conflict (409), mismatch (422), invalid (400), unknown_refused (502), kept, released, not_kept, unknown (claims ended with the outcome unknown), lost, store_error, bypassed.",
	[]string{"route", "result"}, nil)

func (c idempotencyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- idempotencyDesc }

func (c idempotencyCollector) Collect(ch chan<- prometheus.Metric) {
	c.list(func(s IdempotencyState) {
		for _, r := range s.Results {
			ch <- prometheus.MustNewConstMetric(idempotencyDesc, prometheus.CounterValue, float64(r.Count), s.Route, r.Result)
		}
	})
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Registry is the registry the metrics live in, for tests and embedding.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) series(up string) *series {
	if s, ok := m.byUp.Load(up); ok {
		return s.(*series)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.byUp.Load(up); ok {
		return s.(*series)
	}
	s := &series{
		duration: m.duration.WithLabelValues(up),
		denied:   m.denied.WithLabelValues(up),
		stale:    m.stale.WithLabelValues(up),
		aborted:  m.aborted.WithLabelValues(up),
	}
	m.byUp.Store(up, s)
	return s
}

func child(cache *sync.Map, vec *prometheus.CounterVec, up, label string) prometheus.Counter {
	if c, ok := cache.Load(label); ok {
		return c.(prometheus.Counter)
	}
	c := vec.WithLabelValues(up, label)
	cache.Store(label, c)
	return c
}

func upstreamOf(p *proxy.Peer) string {
	if p == nil || p.Upstream == "" {
		return "-"
	}
	return p.Upstream
}

// Try implements proxy.Observer.
func (m *Metrics) Try(s *proxy.Session, a *proxy.Attempt) {
	up := upstreamOf(a.Peer)
	ser := m.series(up)
	outcome := "ok"
	if a.Err != nil {
		outcome = reason(a.Err)
	}
	child(&ser.tries, m.tries, up, outcome).Inc()
	if rec := m.rec.Load(); rec != nil {
		rec.Try(a)
	}
	if a.StaleResend {
		ser.stale.Inc()
	}
	if a.Err != nil {
		if a.Err.Kind == fault.Exhausted {
			m.exhausted.WithLabelValues(resource(a.Err), "upstream").Inc()
		}
		if a.Err.Retry {
			child(&ser.retries, m.retries, up, outcome).Inc()
		} else {
			child(&ser.given, m.given, up, outcome).Inc()
		}
	}
}

// reason names a failure for a label: the kind, or the status.
func reason(e *fault.Error) string {
	if e.Kind == fault.UpstreamStatus {
		return "http_" + strconv.Itoa(e.Status)
	}
	return e.Kind.String()
}

// resource names what sluice ran out of, for a label.
func resource(err error) string {
	if r := fault.Resource(err); r != "" {
		return r
	}
	return "other"
}

// Done implements proxy.Observer.
func (m *Metrics) Done(s *proxy.Session) {
	up := "-"
	if n := len(s.Attempts); n > 0 {
		up = upstreamOf(s.Attempts[n-1].Peer)
	}
	ser := m.series(up)
	code := "0"
	if s.Status > 0 && s.Status < len(m.codes) {
		code = m.codes[s.Status]
	}
	child(&ser.requests, m.requests, up, code).Inc()
	ser.duration.Observe(time.Since(s.Start).Seconds())
	if s.Aborted {
		ser.aborted.Inc()
	}
}

// clientKinds are the kinds of the client-fault series made up front.
var clientKinds = [3]fault.Kind{fault.ClientTimeout, fault.ClientClosed, fault.BadRequest}

// ClientFault implements proxy.ClientFaultObserver.
func (m *Metrics) ClientFault(stage proxy.ClientStage, e *fault.Error) {
	if int(stage) < len(m.faultSeries) {
		for k, kind := range clientKinds {
			if e.Kind == kind {
				m.faultSeries[stage][k].Inc()
				return
			}
		}
	}
	m.faults.WithLabelValues(stage.String(), e.Kind.String()).Inc()
}

var _ proxy.ClientFaultObserver = (*Metrics)(nil)

// BudgetDenied implements proxy.Observer.
func (m *Metrics) BudgetDenied(s *proxy.Session, p *proxy.Peer) {
	m.series(upstreamOf(p)).denied.Inc()
}

// Handshake implements proxy.TLSObserver.
func (m *Metrics) Handshake(st *tls.ConnectionState) {
	r := 0
	if st.DidResume {
		r = 1
	}
	switch st.Version {
	case tls.VersionTLS12:
		m.handshakes[0][r].Inc()
	case tls.VersionTLS13:
		m.handshakes[1][r].Inc()
	default:
		m.handshake.WithLabelValues(proxy.TLSVersion(st.Version), strconv.FormatBool(st.DidResume)).Inc()
	}
}

// HandshakeFailed implements proxy.TLSObserver.
func (m *Metrics) HandshakeFailed(reason proxy.HandshakeFailure, err error) {
	if int(reason) < len(m.tlsFailures) {
		m.tlsFailures[reason].Inc()
		return
	}
	m.tlsFailed.WithLabelValues(reason.String()).Inc()
}

var _ proxy.TLSObserver = (*Metrics)(nil)

// Shed implements proxy.ShedObserver.
func (m *Metrics) Shed(n int, err error) {
	m.exhausted.WithLabelValues(resource(err), "accept").Add(float64(n))
}

var _ proxy.ShedObserver = (*Metrics)(nil)

// poolCollector reports the pool's counters at scrape time.
type poolCollector struct{ p *pool.Pool }

var poolDescs = map[string]*prometheus.Desc{
	"hits":      prometheus.NewDesc("sluice_pool_hits_total", "Requests sent on a pooled connection.", nil, nil),
	"misses":    prometheus.NewDesc("sluice_pool_misses_total", "Requests that found no usable pooled connection.", nil, nil),
	"stale":     prometheus.NewDesc("sluice_pool_stale_total", "Pooled connections found closed by the upstream at the check before use.", nil, nil),
	"watched":   prometheus.NewDesc("sluice_pool_closed_while_idle_total", "Idle connections removed by the idle watcher when the upstream closed them.", nil, nil),
	"expired":   prometheus.NewDesc("sluice_pool_expired_total", "Idle connections closed after idle_timeout or a learned Keep-Alive timeout.", nil, nil),
	"retired":   prometheus.NewDesc("sluice_pool_retired_total", "Connections retired by max_requests, max_age or a learned Keep-Alive max.", nil, nil),
	"evicted":   prometheus.NewDesc("sluice_pool_evicted_total", "Idle connections closed to respect max_idle limits.", nil, nil),
	"tooold":    prometheus.NewDesc("sluice_pool_skipped_idle_total", "Pooled connections passed over by requests that must not be resent, for being idle too long.", nil, nil),
	"closing":   prometheus.NewDesc("sluice_pool_skipped_closing_total", "Pooled connections passed over by requests that must not be resent, for predating their server's announced close.", nil, nil),
	"untrusted": prometheus.NewDesc("sluice_pool_untrusted_total", "Requests that must not be resent that dialed because their server had not earned the pool's trust (pool.non_idempotent: learn).", nil, nil),
	"idle":      prometheus.NewDesc("sluice_pool_idle_connections", "Idle pooled connections now.", nil, nil),
}

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range poolDescs {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.Stats()
	counter := func(name string, v uint64) {
		ch <- prometheus.MustNewConstMetric(poolDescs[name], prometheus.CounterValue, float64(v))
	}
	counter("hits", s.Hits)
	counter("misses", s.Misses)
	counter("stale", s.Stale)
	counter("watched", s.Watched)
	counter("expired", s.Expired)
	counter("retired", s.Retired)
	counter("evicted", s.Evicted)
	counter("tooold", s.TooOld)
	counter("closing", s.Closing)
	counter("untrusted", s.Untrusted)
	ch <- prometheus.MustNewConstMetric(poolDescs["idle"], prometheus.GaugeValue, float64(s.Idle))
}
