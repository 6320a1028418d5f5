package observe

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/proxy"
)

// Recorder keeps, for each upstream server, what a status page shows and
// Prometheus counters do not: rates and latency percentiles over the last
// minute, failures by reason, and the last failures with their
// Proxy-Status text. It is fed the tries the proxy makes (Try, which
// Metrics calls when it has a Recorder) and read by the admin API
// (Server).
//
// Recording a try that succeeded takes no lock and allocates nothing once
// the try's peer has been seen: counters and latency buckets are atomics
// in fixed-size rings of time slots. A failed try also takes its server's
// lock to note the failure. Rates and percentiles are approximate: a try
// recorded while its slot is being recycled may be lost.
type Recorder struct {
	start time.Time

	byPeer sync.Map // *proxy.Peer -> *ServerStats: the hot path's lookup

	mu     sync.Mutex
	byName map[serverKey]*ServerStats
}

type serverKey struct{ upstream, addr string }

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now(), byName: make(map[serverKey]*ServerStats)}
}

// The ring of time slots: slotCount slots of slotLength, so that rates and
// percentiles cover the last minute.
const (
	slotLength = 5 * time.Second
	slotCount  = 12
	// Window is the span rates and percentiles are computed over.
	Window = slotLength * slotCount
)

// Latency buckets: bucket 0 holds up to latencyBase, bucket i up to
// latencyBase·√2^i, the last everything above.
const (
	latencyBase    = 100 * time.Microsecond
	latencyBuckets = 40 // the last bound is 100µs·2^19.5, about 74s
)

// recentErrors is how many kinds of failure a server keeps, the most
// recent ones.
const recentErrors = 16

// ServerStats is what the Recorder keeps of one server.
type ServerStats struct {
	upstream, addr string

	tries, failures, retries atomic.Uint64 // since the Recorder first saw the server
	slots                    [slotCount]slot

	mu      sync.Mutex
	reasons map[string]uint64      // failures by reason, since first seen
	recent  [recentErrors]TryError // the last kinds of failure, the most recent first
	noted   int                    // how many of recent are in use
}

// slot counts the tries of one slotLength.
type slot struct {
	epoch                    atomic.Int64 // which slotLength since the Unix epoch the counts are for
	tries, failures, retries atomic.Uint64
	latency                  [latencyBuckets]atomic.Uint64 // tries with a response head, by time to it
}

// TryError is a kind of failed try, as a status page lists it: tries
// that failed alike (the same Reason, ProxyStatus, Retried and Decision)
// are one TryError with their Count, so that a server failing every try
// the same way lists one line, and the kinds it keeps are not pushed out
// by repeats of one.
type TryError struct {
	// Time is when the last of them failed; First when the first did
	// (since the kind was last pushed out of the list, if it was).
	Time  time.Time `json:"time"`
	First time.Time `json:"first"`
	Count uint64    `json:"count"`
	// Reason is the failure as the metrics label it: the kind
	// (connect_refused, response_timeout, ...) or http_NNN.
	Reason string `json:"reason"`
	// ProxyStatus is the Proxy-Status field (RFC 9209) the failure would
	// answer with: "sluice; error=connection_refused".
	ProxyStatus string `json:"proxy_status"`
	// Error is the last one's error text (the others' may differ in
	// detail: a local port, say).
	Error string `json:"error"`
	// Retried says whether another try followed; Decision says why or
	// why not, in the words of the logs' decision ("retrying: ...",
	// "not retried: ...").
	Retried  bool   `json:"retried"`
	Decision string `json:"decision,omitempty"`
}

// alike reports whether e is a failure of the same kind as te.
func (te *TryError) alike(e *TryError) bool {
	return te.Reason == e.Reason && te.ProxyStatus == e.ProxyStatus && te.Retried == e.Retried && te.Decision == e.Decision
}

// Try records one try of a request; Metrics.Try calls it.
func (r *Recorder) Try(a *proxy.Attempt) {
	if a.Peer == nil {
		return
	}
	st := r.stats(a.Peer)
	end := a.Start.Add(a.Duration)
	if a.Start.IsZero() {
		end = time.Now()
	}
	if a.Err != nil && a.Err.Source == fault.Downstream {
		return // the client's fault, not the server's
	}
	sl := st.slot(end)
	st.tries.Add(1)
	sl.tries.Add(1)
	if a.Status > 0 {
		sl.latency[latencyBucket(a.Wait)].Add(1)
	}
	if a.Err == nil {
		return
	}
	st.failures.Add(1)
	sl.failures.Add(1)
	if a.Err.Retry {
		st.retries.Add(1)
		sl.retries.Add(1)
	}
	st.note(end, a.Err)
}

// stats returns the ServerStats of p's server, made on first sight.
func (r *Recorder) stats(p *proxy.Peer) *ServerStats {
	if st, ok := r.byPeer.Load(p); ok {
		return st.(*ServerStats)
	}
	k := serverKey{p.Upstream, p.Addr}
	r.mu.Lock()
	st := r.byName[k]
	if st == nil {
		st = &ServerStats{upstream: p.Upstream, addr: p.Addr}
		r.byName[k] = st
	}
	r.mu.Unlock()
	r.byPeer.Store(p, st)
	return st
}

// Server returns what the Recorder kept of the server at addr of
// upstream, or nil if it saw no try to it.
func (r *Recorder) Server(upstream, addr string) *ServerStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[serverKey{upstream, addr}]
}

// Retain forgets the servers keep reports false for, and the peers seen so
// far (a config reload makes new ones); the servers kept keep their
// counts. Call it after a reload with the servers of the new generation.
func (r *Recorder) Retain(keep func(upstream, addr string) bool) {
	r.mu.Lock()
	for k := range r.byName {
		if !keep(k.upstream, k.addr) {
			delete(r.byName, k)
		}
	}
	r.mu.Unlock()
	r.byPeer.Clear()
}

// slot returns the slot for time t, recycling it when it last counted an
// older span.
func (st *ServerStats) slot(t time.Time) *slot {
	e := t.UnixNano() / int64(slotLength)
	sl := &st.slots[e%slotCount]
	if old := sl.epoch.Load(); old != e && sl.epoch.CompareAndSwap(old, e) {
		sl.tries.Store(0)
		sl.failures.Store(0)
		sl.retries.Store(0)
		for i := range sl.latency {
			sl.latency[i].Store(0)
		}
	}
	return sl
}

// note counts a failure in its kind among the server's recent ones, which
// moves to the front; a new kind goes to the front, and the least recent
// kind is forgotten when the list is full.
func (st *ServerStats) note(t time.Time, e *fault.Error) {
	te := TryError{Time: t, First: t, Count: 1, Reason: reason(e), ProxyStatus: ProxyStatus(e), Error: e.Error(), Retried: e.Retry, Decision: e.Why}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.reasons == nil {
		st.reasons = make(map[string]uint64)
	}
	st.reasons[te.Reason]++
	i := 0
	for i < st.noted && !st.recent[i].alike(&te) {
		i++
	}
	switch {
	case i < st.noted:
		old := &st.recent[i]
		te.First, te.Count = old.First, old.Count+1
	case st.noted < recentErrors:
		st.noted++
	default:
		i = recentErrors - 1 // the least recent kind goes
	}
	copy(st.recent[1:i+1], st.recent[:i])
	st.recent[0] = te
}

// ProxyStatus returns the Proxy-Status field (RFC 9209) that answers e,
// without the details of the tries: "sluice; error=connection_timeout".
func ProxyStatus(e *fault.Error) string {
	s := "sluice; error=" + e.ProxyStatus()
	if p := e.ProxyStatusParams(); p != "" {
		s += "; " + p
	}
	return s
}

// latencyBucket returns the bucket of a time to the response head.
func latencyBucket(d time.Duration) int {
	if d <= latencyBase {
		return 0
	}
	i := int(math.Ceil(2 * math.Log2(float64(d)/float64(latencyBase))))
	return min(max(i, 0), latencyBuckets-1)
}

// latencyBound returns the upper bound of bucket i.
func latencyBound(i int) time.Duration {
	return time.Duration(float64(latencyBase) * math.Pow(2, float64(i)/2))
}

// Snapshot is one server's statistics at a moment, as the admin API shows
// them.
type Snapshot struct {
	// Tries, Failures and Retries count since the Recorder first saw the
	// server: tries made (client faults left out), those that failed, and
	// the failed ones another try followed.
	Tries    uint64 `json:"tries"`
	Failures uint64 `json:"failures"`
	Retries  uint64 `json:"retries"`
	// The rates per second over the last Window (or since the Recorder
	// started, when that is shorter).
	TriesPerSecond    float64 `json:"tries_per_second"`
	FailuresPerSecond float64 `json:"failures_per_second"`
	RetriesPerSecond  float64 `json:"retries_per_second"`
	// Latency is the time to the response head over the last Window, in
	// milliseconds, estimated from buckets √2 apart; zero with no sample.
	Latency Percentiles `json:"latency_ms"`
	// Reasons counts failures by reason since first seen.
	Reasons map[string]uint64 `json:"failure_reasons"`
	// Recent lists the last kinds of failure, each with its count, the
	// most recent first.
	Recent []TryError `json:"recent_failures"`
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	Samples uint64  `json:"samples"`
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P99     float64 `json:"p99"`
}

// Snapshot returns the server's statistics at now. A nil ServerStats (a
// server no try went to) has zero ones.
func (r *Recorder) Snapshot(st *ServerStats, now time.Time) Snapshot {
	out := Snapshot{Reasons: map[string]uint64{}, Recent: []TryError{}}
	if st == nil {
		return out
	}
	out.Tries, out.Failures, out.Retries = st.tries.Load(), st.failures.Load(), st.retries.Load()
	cur := now.UnixNano() / int64(slotLength)
	var tries, failures, retries uint64
	var hist [latencyBuckets]uint64
	for i := range st.slots {
		sl := &st.slots[i]
		if e := sl.epoch.Load(); e > cur-slotCount && e <= cur {
			tries += sl.tries.Load()
			failures += sl.failures.Load()
			retries += sl.retries.Load()
			for b := range sl.latency {
				hist[b] += sl.latency[b].Load()
			}
		}
	}
	// The window reaches back to the start of its oldest slot, or to the
	// Recorder's start.
	from := time.Unix(0, (cur-slotCount+1)*int64(slotLength))
	if r.start.After(from) {
		from = r.start
	}
	if span := now.Sub(from).Seconds(); span > 0 {
		out.TriesPerSecond = float64(tries) / span
		out.FailuresPerSecond = float64(failures) / span
		out.RetriesPerSecond = float64(retries) / span
	}
	out.Latency = percentiles(hist[:])
	st.mu.Lock()
	for k, v := range st.reasons {
		out.Reasons[k] = v
	}
	out.Recent = append(out.Recent, st.recent[:st.noted]...)
	st.mu.Unlock()
	sort.SliceStable(out.Recent, func(i, j int) bool { return out.Recent[i].Time.After(out.Recent[j].Time) })
	return out
}

// percentiles estimates the 50th, 90th and 99th percentiles of the
// histogram, interpolating linearly within a bucket.
func percentiles(hist []uint64) Percentiles {
	var n uint64
	for _, c := range hist {
		n += c
	}
	p := Percentiles{Samples: n}
	if n == 0 {
		return p
	}
	at := func(q float64) float64 {
		rank := q * float64(n)
		var seen float64
		for i, c := range hist {
			if c == 0 {
				continue
			}
			if seen+float64(c) >= rank {
				lo := time.Duration(0)
				if i > 0 {
					lo = latencyBound(i - 1)
				}
				hi := latencyBound(i)
				f := (rank - seen) / float64(c)
				return float64(lo+time.Duration(f*float64(hi-lo))) / float64(time.Millisecond)
			}
			seen += float64(c)
		}
		return float64(latencyBound(len(hist)-1)) / float64(time.Millisecond)
	}
	p.P50, p.P90, p.P99 = at(0.5), at(0.9), at(0.99)
	return p
}
