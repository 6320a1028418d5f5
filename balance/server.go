package balance

import (
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/internal/clock"
	"github.com/sluice-proxy/sluice/internal/sock"
)

// Server is one upstream endpoint (an address) with its weight, role and
// health. The exported fields are its configuration: set them before the
// server is given to NewGroup and do not change them afterwards. Its health
// state is kept inside, safe for concurrent use, and read through Healthy,
// State, Outstanding and Latency.
//
// A Server belongs to one Group. NewGroup copies the configuration of a
// server that already belongs to another group, and a config reload carries
// health from one generation's servers to the next with Group.Carry.
type Server struct {
	// Addr is the address to dial, host:port, or "unix:PATH" for a Unix
	// domain socket. For a server the group resolved from a DNS name it
	// is an IP:port.
	Addr string
	// Name is the configured address the server came from (app.internal:8080
	// for a resolved server); for an IP-literal server it equals Addr.
	Name string
	// Weight (default 1; less than 1 counts as 1) is the server's share of
	// requests relative to the other servers of its group.
	Weight int
	// Backup servers take requests only when no primary is available.
	Backup bool
	// ResolveInterval is how often a DNS-named server is looked up again
	// (default DefaultResolveInterval); a failed lookup is retried sooner.
	ResolveInterval time.Duration

	g *Group // the owner; set before the server is published

	outstanding atomic.Int64 // tries picked and not yet reported

	// drained is set while the server is taken out by hand (Group.Drain):
	// Pick never offers it, by any rule.
	drained atomic.Bool

	// Health, readable without the lock. Times are Unix nanoseconds of the
	// group's clock.
	failedUntil   atomic.Int64 // down by max_fails until then
	ejectedUntil  atomic.Int64 // ejected by consecutive failures until then
	rampFrom      atomic.Int64 // slow start origin: when it last came back (0: never left)
	activeDown    atomic.Bool  // failed its active checks
	failing       atomic.Bool  // a failure counter below is not zero
	announcedDown atomic.Bool  // the health last announced (log, OnChange) was "unhealthy"
	// probe is the state of the probe of a server held out by a passive
	// rule (see Options.NoProbe): t > 0 when one try may go to it from t
	// on, -t while a Pick's probe try is in flight, 0 when none was
	// scheduled. A t left from a down time that ended means nothing.
	probe atomic.Int64

	// Latency: a peak-sensitive EWMA (float64 nanoseconds) and when it was
	// last updated. Written under latMu, read without it.
	latMu  sync.Mutex
	ewma   atomic.Uint64
	ewmaAt atomic.Int64

	mu          sync.Mutex // guards the rest
	fails       int        // failures in the current fail_timeout window
	failsSince  int64      // start of that window
	failReason  string     // why it is down by max_fails
	consecutive int        // failures in a row
	ejections   int        // ejection multiplier
	ejectionEnd int64      // when the last ejection ended
	ejectReason string     // why it is ejected
	checkOK     int        // active checks passed in a row
	checkFail   int        // active checks failed in a row
	checkErr    string     // the last failed check's error
}

// weightScale is what one unit of configured weight counts for in the
// effective weights the policies see, so that slow start can give a server
// a fraction of its weight in integers.
const weightScale = 1000

// clone returns a new server with s's configuration and no state.
func (s *Server) clone() *Server {
	return &Server{Addr: s.Addr, Name: s.Name, Weight: s.Weight, Backup: s.Backup, ResolveInterval: s.ResolveInterval}
}

func (s *Server) weight() int {
	return max(s.Weight, 1)
}

// String returns the server's address, and its configured name when that
// differs.
// Host returns the host of the server's configured address (Name): the
// name its TLS certificate is verified against, a DNS name for a server
// resolved from one; "" for a Unix socket, which has none. Name must not
// change, as the rest of the configuration.
func (s *Server) Host() string {
	if _, unix := sock.UnixPath(s.Name); unix {
		return ""
	}
	if host, _, err := net.SplitHostPort(s.Name); err == nil {
		return host
	}
	return s.Name
}

func (s *Server) String() string {
	if s.Name != "" && s.Name != s.Addr {
		return s.Addr + " (" + s.Name + ")"
	}
	return s.Addr
}

func (s *Server) now() time.Time {
	if s.g != nil {
		return s.g.opts.Now()
	}
	return clock.Now()
}

// availableAt reports whether the server may take requests at now: it
// passes its active checks and is neither down by max_fails nor ejected.
func (s *Server) availableAt(now int64) bool {
	return !s.activeDown.Load() && now >= s.failedUntil.Load() && now >= s.ejectedUntil.Load()
}

// heldOutAt reports whether a passive rule holds the server out at now:
// it is down by max_fails or ejected.
func (s *Server) heldOutAt(now int64) bool {
	return now < s.failedUntil.Load() || now < s.ejectedUntil.Load()
}

// probeDue reports, cheaply, whether a probe of the server may be due at
// now; takeProbe decides.
func (s *Server) probeDue(now int64) bool {
	p := s.probe.Load()
	return p > 0 && now >= p
}

// takeProbe claims the server's probe for one try at now and counts that
// try as outstanding. It succeeds only when the probe is due, a passive
// rule alone holds the server out (one failing its active checks waits for
// them), no try is in flight to the server, and no other Pick claimed the
// probe first. It takes no lock.
func (s *Server) takeProbe(now int64) bool {
	p := s.probe.Load()
	if p <= 0 || now < p || s.activeDown.Load() || !s.heldOutAt(now) {
		return false
	}
	// No try in flight, and none can start as a probe meanwhile: the
	// outstanding count is the gate, so that two probes are never in
	// flight at once even if the probe state is rewritten under us.
	if !s.outstanding.CompareAndSwap(0, 1) {
		return false
	}
	if !s.probe.CompareAndSwap(p, -p) {
		s.release()
		return false
	}
	return true
}

// scheduleProbe makes the server's probe due at t, or at the time already
// scheduled if that is later (a down time by one rule while the other holds
// the server out longer: the probe comes at half of the longer). A probe in
// flight stops being one: its report counts as an ordinary try. s.mu is
// held.
func (s *Server) scheduleProbe(t int64) {
	if old := abs(s.probe.Load()); old > t {
		t = old
	}
	s.probe.Store(t)
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// Healthy reports whether the server may take requests now by its own
// health: it passes its active checks (or has none) and is neither down by
// max_fails nor ejected. A group whose servers are all unhealthy still uses
// them (panic mode).
func (s *Server) Healthy() bool {
	return s.availableAt(s.now().UnixNano())
}

// Outstanding returns the number of tries the group picked this server for
// and that were not reported yet.
func (s *Server) Outstanding() int64 {
	return s.outstanding.Load()
}

// Ejections returns the server's ejection multiplier: how many ejections
// by the consecutive-failure rule its last one counted (0: never ejected).
// It decays, one per BaseEjection after an ejection ends, when the next
// ejection is decided, so it is an upper bound between ejections.
func (s *Server) Ejections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ejections
}

// Drained reports whether the server is taken out by hand (Group.Drain).
// Its health goes on being tracked, and Healthy says what it is.
func (s *Server) Drained() bool {
	return s.drained.Load()
}

// release takes back one outstanding try, never going below zero.
func (s *Server) release() {
	for {
		n := s.outstanding.Load()
		if n <= 0 || s.outstanding.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// Latency returns the server's latency estimate now: a peak-sensitive
// moving average of the durations reported for it (a slower try raises it at
// once, a faster one lowers it by a quarter of the difference) that decays
// towards zero with a 10s time constant while no report arrives, so that a
// server once slow is tried again later. It is 0 before the first report.
func (s *Server) Latency() time.Duration {
	return time.Duration(s.latencyAt(s.now().UnixNano()))
}

// latencyDecay is the time constant of the latency estimate: a sample's
// weight falls to 1/e after this long (Finagle's peak EWMA uses 10s too).
const latencyDecay = float64(10 * time.Second)

// latencyAt returns the latency estimate at now, in nanoseconds.
func (s *Server) latencyAt(now int64) float64 {
	v := math.Float64frombits(s.ewma.Load())
	if v == 0 {
		return 0
	}
	if dt := now - s.ewmaAt.Load(); dt > 0 {
		v *= math.Exp(-float64(dt) / latencyDecay)
	}
	return v
}

// latencyAlpha is how far a sample below the estimate moves it down.
const latencyAlpha = 0.25

// observe adds one latency sample at now: a sample above the (decayed)
// estimate replaces it, so a server that turns slow is avoided at once (peak
// sensitivity); one below moves it a quarter of the way down.
func (s *Server) observe(now int64, d time.Duration) {
	s.latMu.Lock()
	defer s.latMu.Unlock()
	cur, v := s.latencyAt(now), float64(d)
	if v < cur {
		v = cur + (v-cur)*latencyAlpha
	}
	s.ewma.Store(math.Float64bits(v))
	s.ewmaAt.Store(now)
}

// effectiveWeight returns the weight the policies see at now: the
// configured weight times weightScale, ramped from 10% to 100% over
// slowStart after the server came back. It is at least 1.
func (s *Server) effectiveWeight(now int64, slowStart time.Duration) int64 {
	w := int64(s.weight()) * weightScale
	if slowStart <= 0 {
		return w
	}
	since := now - s.rampFrom.Load()
	if since >= int64(slowStart) {
		return w
	}
	since = max(since, 0)
	f := 0.1 + 0.9*float64(since)/float64(slowStart)
	return max(int64(float64(w)*f), 1)
}

// comeBackAt records that the server becomes available again at t, for
// slow start.
func (s *Server) comeBackAt(t int64) {
	for {
		old := s.rampFrom.Load()
		if t <= old || s.rampFrom.CompareAndSwap(old, t) {
			return
		}
	}
}

// State describes the server's health for logs and metrics, e.g. "healthy",
// "healthy (slow start, 40% weight)", "unhealthy (active: 3 failed checks:
// connection refused)", "ejected until 2026-01-02T15:04:05Z (5 consecutive
// failures, ejection 2)" or "down until 2026-01-02T15:04:05Z (3 failures
// within 10s, last: connect failure)". Health has the same facts apart.
func (s *Server) State() string {
	h := s.Health()
	switch h.Condition {
	case Unhealthy:
		return "unhealthy (" + h.Reason + ")"
	case Ejected, Down:
		return fmt.Sprintf("%s until %s (%s)", h.Condition, h.Until.Format(time.RFC3339Nano), h.Reason)
	case SlowStart:
		return "healthy (" + h.Reason + ")"
	}
	return "healthy"
}

// Condition names a server's health: Healthy, SlowStart, Unhealthy, Down or
// Ejected.
type Condition string

const (
	// Healthy: the server takes its full share of requests.
	Healthy Condition = "healthy"
	// SlowStart: back from a down time, it takes a growing share of its
	// weight (Options.SlowStart).
	SlowStart Condition = "slow_start"
	// Unhealthy: it failed its active checks, until one passes again.
	Unhealthy Condition = "unhealthy"
	// Down: it failed max_fails tries within fail_timeout, and is held
	// out until Health.Until.
	Down Condition = "down"
	// Ejected: it failed tries in a row, and is held out until
	// Health.Until.
	Ejected Condition = "ejected"
)

// Health is a server's health at a moment, in parts: what State says in
// one line, for a status page to show its own way.
type Health struct {
	Condition Condition
	// Until is when a server Down or Ejected may take requests again (in
	// the location of the group's clock); zero otherwise.
	Until time.Time
	// Reason says why: the failures that took it out ("3 failures within
	// 10s, last: connect failure"), the failed checks ("active: 3 failed
	// checks: connection refused"), the share of slow start ("slow start,
	// 40% weight"); "" when Healthy.
	Reason string
}

// Health returns the server's health now. Drained is apart: a drained
// server keeps its health.
func (s *Server) Health() Health {
	t := s.now()
	now := t.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.activeDown.Load():
		return Health{Condition: Unhealthy, Reason: fmt.Sprintf("active: %d failed checks: %s", s.checkFail, s.checkErr)}
	case now < s.ejectedUntil.Load():
		return Health{Condition: Ejected, Until: stamp(s.ejectedUntil.Load(), t), Reason: s.ejectReason}
	case now < s.failedUntil.Load():
		return Health{Condition: Down, Until: stamp(s.failedUntil.Load(), t), Reason: s.failReason}
	}
	if s.g != nil {
		full := int64(s.weight()) * weightScale
		if w := s.effectiveWeight(now, s.g.opts.SlowStart); w < full {
			return Health{Condition: SlowStart, Reason: fmt.Sprintf("slow start, %d%% weight", w*100/full)}
		}
	}
	return Health{Condition: Healthy}
}

// stamp returns the Unix-nanosecond time ns in now's location.
func stamp(ns int64, now time.Time) time.Time {
	return time.Unix(0, ns).In(now.Location())
}

// carryFrom copies o's health state into s, which is not yet in use.
func (s *Server) carryFrom(o *Server) {
	o.mu.Lock()
	fails, failsSince, failReason := o.fails, o.failsSince, o.failReason
	consecutive, ejections, ejectionEnd, ejectReason := o.consecutive, o.ejections, o.ejectionEnd, o.ejectReason
	checkOK, checkFail, checkErr := o.checkOK, o.checkFail, o.checkErr
	o.mu.Unlock()

	s.mu.Lock()
	s.fails, s.failsSince, s.failReason = fails, failsSince, failReason
	s.consecutive, s.ejections, s.ejectionEnd, s.ejectReason = consecutive, ejections, ejectionEnd, ejectReason
	s.checkOK, s.checkFail, s.checkErr = checkOK, checkFail, checkErr
	s.mu.Unlock()

	s.failedUntil.Store(o.failedUntil.Load())
	s.ejectedUntil.Store(o.ejectedUntil.Load())
	s.rampFrom.Store(o.rampFrom.Load())
	s.activeDown.Store(o.activeDown.Load())
	s.failing.Store(o.failing.Load())
	s.announcedDown.Store(o.announcedDown.Load())
	// A probe in flight reports to o; s may take its own once it is due.
	s.probe.Store(abs(o.probe.Load()))
	s.ewma.Store(o.ewma.Load())
	s.ewmaAt.Store(o.ewmaAt.Load())
}
