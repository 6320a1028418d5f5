package balance

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// FailureKind says how a try on a server ended, as far as the server's
// health is concerned.
type FailureKind uint8

const (
	// NoFailure: a response head arrived. Result.Status says which; a
	// status listed in Options.Statuses still counts as a failure.
	NoFailure FailureKind = iota
	// ConnectFailure: no connection was made (refused, unreachable, connect
	// timeout). Always a failure; its duration is not a latency sample.
	ConnectFailure
	// Timeout: the connection was not made in time. Always a failure; its
	// duration is a latency sample (a lower bound).
	Timeout
	// InvalidResponse: the server broke HTTP/1.1, or closed or reset the
	// connection before a response. Always a failure.
	InvalidResponse
	// Canceled: the try ended for a reason that is not the server's (the
	// client went away, the proxy is shutting down). It counts neither as a
	// failure nor as a success and gives no latency sample.
	Canceled
	// Slow: the server took the request and did not answer it, or stalled,
	// in time (a response-header, read or write timeout). It counts toward
	// ConsecutiveFailures but not MaxFails: one slow endpoint must not take
	// a server that answers everything else out of service, while a hung
	// server, answering nothing, gets nothing but these and is ejected. Its
	// duration is a latency sample (a lower bound).
	Slow
)

var failureNames = [...]string{
	NoFailure:       "response",
	ConnectFailure:  "connect failure",
	Timeout:         "timeout",
	InvalidResponse: "invalid response",
	Canceled:        "canceled",
	Slow:            "slow",
}

func (k FailureKind) String() string {
	if int(k) < len(failureNames) {
		return failureNames[k]
	}
	return fmt.Sprintf("FailureKind(%d)", k)
}

// Result is what happened on one try, reported to Group.Report.
type Result struct {
	Failure  FailureKind
	Status   int           // the response status, when a response head arrived
	Duration time.Duration // from the start of the try to its end (or to the response head)
	// End is when the try ended, on the monotonic clock of
	// internal/clock (as a proxy's Attempt is timed), so that Report need
	// not read the clock again; zero: Report reads it. A group given its
	// own clock (Options.Now) reads that one whatever End says.
	End time.Time
}

// Report gives the group the outcome of one try on s, which Pick returned:
// it releases the try's outstanding count (see Pick) and feeds the
// passive health rules and the latency estimate. Call it exactly once per
// Pick, whatever happened. Safe for concurrent use; a success on a server
// with no recent failure takes no lock.
//
// A try counts as a failure when its Failure is ConnectFailure, Timeout,
// InvalidResponse or Slow (toward ConsecutiveFailures only), or when its
// Status is one of Options.Statuses; any other try but a Canceled one is a
// success. A success clears the server's consecutive-failure counts; it
// does not end a down time already begun, unless it is the server's probe
// (see Options.NoProbe), which ends it, while a failed probe starts it
// over and a Canceled one lets the next Pick probe instead. While a probe
// is in flight, the server's first report is taken for the probe's.
func (g *Group) Report(s *Server, r Result) {
	s.release()
	if r.Failure == Canceled {
		if p := s.probe.Load(); p < 0 {
			s.probe.CompareAndSwap(p, -p) // no verdict: due again
		}
		return
	}
	t := r.End
	if t.IsZero() || !g.defaultClock {
		t = g.opts.Now()
	}
	now := t.UnixNano()
	if r.Duration > 0 && r.Failure != ConnectFailure {
		s.observe(now, r.Duration)
	}
	ok := r.Failure == NoFailure && !g.countsStatus(r.Status)
	if s.probe.Load() < 0 && g.probed(s, now, ok, r) {
		return
	}
	if ok {
		if s.failing.Load() {
			s.mu.Lock()
			s.fails, s.consecutive = 0, 0
			s.failing.Store(false)
			s.mu.Unlock()
		}
		return
	}
	g.failed(s, now, r)
}

// countsStatus reports whether a response with status counts as a failure.
func (g *Group) countsStatus(status int) bool {
	return status >= 0 && status < len(g.statuses)*64 && g.statuses[status/64]&(1<<(status%64)) != 0
}

// failureText names the failure r for logs and State.
func failureText(r Result) string {
	if r.Failure == NoFailure {
		return fmt.Sprintf("status %d", r.Status)
	}
	return r.Failure.String()
}

// failed applies one failure of s at now to both passive rules.
func (g *Group) failed(s *Server, now int64, r Result) {
	what := failureText(r)
	o := &g.opts
	s.mu.Lock()
	s.failing.Store(true)
	var reason string
	if o.MaxFails > 0 && r.Failure != Slow && now >= s.failedUntil.Load() {
		if s.fails == 0 || now-s.failsSince > int64(o.FailTimeout) {
			s.fails, s.failsSince = 0, now
		}
		s.fails++
		if s.fails >= o.MaxFails {
			g.takeDown(s, now, fmt.Sprintf("%d failures within %v, last: %s", s.fails, o.FailTimeout, what))
			reason = s.failReason
		}
	}
	if o.ConsecutiveFailures > 0 && now >= s.ejectedUntil.Load() {
		s.consecutive++
		if s.consecutive >= o.ConsecutiveFailures && g.eject(s, now, what) {
			reason = s.ejectReason
		}
	}
	s.mu.Unlock()
	if reason != "" {
		g.noteHealth(s, now, reason)
	}
}

// takeDown takes s, whose lock is held, down by max_fails for FailTimeout
// from now, for reason.
func (g *Group) takeDown(s *Server, now int64, reason string) {
	d := g.opts.FailTimeout
	until := now + int64(d)
	s.failReason = reason
	s.fails = 0
	s.failedUntil.Store(until)
	s.comeBackAt(until)
	g.scheduleProbe(s, now, d)
}

// eject ejects s, whose lock is held, unless that would put the share of
// ejected servers over MaxEjectedPercent. It reports whether it did.
func (g *Group) eject(s *Server, now int64, what string) bool {
	o := &g.opts
	// One ejection decision at a time, so that two servers failing at
	// once cannot both pass the cap. Only other servers' atomics are read.
	g.ejectMu.Lock()
	defer g.ejectMu.Unlock()
	all := g.members.Load().all
	ejected := 0
	for _, x := range all {
		if x != s && now < x.ejectedUntil.Load() {
			ejected++
		}
	}
	if (ejected+1)*100 > o.MaxEjectedPercent*len(all) {
		return false
	}
	if s.ejections > 0 && s.ejectionEnd > 0 && now > s.ejectionEnd {
		s.ejections = max(0, s.ejections-int((now-s.ejectionEnd)/int64(o.BaseEjection)))
	}
	g.startEjection(s, now, fmt.Sprintf("%d consecutive failures, last: %s", s.consecutive, what))
	return true
}

// startEjection ejects s, whose lock is held, from now, as its next
// ejection: BaseEjection times the new count, at most MaxEjection.
func (g *Group) startEjection(s *Server, now int64, why string) {
	o := &g.opts
	s.ejections++
	d := min(o.BaseEjection*time.Duration(s.ejections), o.MaxEjection)
	until := now + int64(d)
	s.ejectReason = fmt.Sprintf("%s; ejection %d for %v", why, s.ejections, d)
	s.consecutive = 0
	s.ejectionEnd = until
	s.ejectedUntil.Store(until)
	s.comeBackAt(until)
	g.scheduleProbe(s, now, d)
}

// scheduleProbe schedules the probe of s, which a passive rule takes out
// at now for d, at half of d, unless probes are off. s.mu is held.
func (g *Group) scheduleProbe(s *Server, now int64, d time.Duration) {
	if !g.opts.NoProbe {
		s.scheduleProbe(now + int64(d/2))
	}
}

// probed applies the outcome of s's probe to it, at now: ok is whether
// the try was a success. It reports whether the report was the probe's
// verdict; it is not when the probe stopped being one (a rule took s out
// anew meanwhile) or when s is no longer held out (its time ended while
// the probe was in flight), and then the caller counts it as an ordinary
// try.
//
// A success ends the down time and the ejection at once, as if they had
// run out. A failure starts each rule that holds s out over from now: a
// down time for FailTimeout again, an ejection as the next ejection
// (longer, not capped by MaxEjectedPercent: s is ejected already), each
// with its probe at half; it counts toward nothing else, so a failed probe
// is never two ejections.
func (g *Group) probed(s *Server, now int64, ok bool, r Result) bool {
	s.mu.Lock()
	p := s.probe.Load()
	if p >= 0 {
		s.mu.Unlock()
		return false
	}
	if !s.heldOutAt(now) {
		s.probe.CompareAndSwap(p, 0)
		s.mu.Unlock()
		return false
	}
	s.probe.Store(0)
	var reason string
	if ok {
		if now < s.ejectedUntil.Load() {
			s.ejectedUntil.Store(now)
			s.ejectionEnd = now
		}
		if now < s.failedUntil.Load() {
			s.failedUntil.Store(now)
		}
		s.fails, s.consecutive = 0, 0
		s.failing.Store(false)
		s.rampFrom.Store(now) // it comes back now, not when its time would have ended
		reason = "probe succeeded"
	} else {
		why := "probe failed: " + failureText(r)
		if now < s.ejectedUntil.Load() {
			g.startEjection(s, now, why)
		}
		if now < s.failedUntil.Load() {
			g.takeDown(s, now, why)
		}
	}
	s.mu.Unlock()
	if reason != "" {
		g.noteHealth(s, now, reason)
	}
	return true
}

// noteHealth announces a change of s's health at now, if there is one since
// the last announcement: one log line and one OnChange call. Changes back to
// healthy at the end of a down time are noticed lazily, by the first Pick
// that looks at the server or by the group's background sweep.
func (g *Group) noteHealth(s *Server, now int64, reason string) {
	down := !s.availableAt(now)
	if down == s.announcedDown.Load() || !s.announcedDown.CompareAndSwap(!down, down) {
		return
	}
	from, to := "healthy", "unhealthy"
	if !down {
		from, to = to, from
	}
	if g.opts.Log != nil {
		level := slog.LevelInfo
		if down {
			level = slog.LevelWarn
		}
		g.opts.Log.LogAttrs(context.Background(), level, "upstream server health changed",
			slog.String("upstream", g.name),
			slog.String("server", s.Addr),
			slog.String("name", s.Name),
			slog.String("from", from),
			slog.String("to", to),
			slog.String("reason", reason))
	}
	if g.opts.OnChange != nil {
		g.opts.OnChange(s, !down)
	}
}
