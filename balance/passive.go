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
// success. A success clears the server's
// consecutive-failure counts; it does not end a down time already begun.
func (g *Group) Report(s *Server, r Result) {
	s.release()
	if r.Failure == Canceled {
		return
	}
	t := g.opts.Now()
	now := t.UnixNano()
	if r.Duration > 0 && r.Failure != ConnectFailure {
		s.observe(now, r.Duration)
	}
	if r.Failure == NoFailure && !g.countsStatus(r.Status) {
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

// failed applies one failure of s at now to both passive rules.
func (g *Group) failed(s *Server, now int64, r Result) {
	what := r.Failure.String()
	if r.Failure == NoFailure {
		what = fmt.Sprintf("status %d", r.Status)
	}
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
			until := now + int64(o.FailTimeout)
			s.failReason = fmt.Sprintf("%d failures within %v, last: %s", s.fails, o.FailTimeout, what)
			reason = s.failReason
			s.fails = 0
			s.failedUntil.Store(until)
			s.comeBackAt(until)
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
	s.ejections++
	d := min(o.BaseEjection*time.Duration(s.ejections), o.MaxEjection)
	until := now + int64(d)
	s.ejectReason = fmt.Sprintf("%d consecutive failures, last: %s; ejection %d for %v", s.consecutive, what, s.ejections, d)
	s.consecutive = 0
	s.ejectionEnd = until
	s.ejectedUntil.Store(until)
	s.comeBackAt(until)
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
