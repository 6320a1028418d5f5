package balance

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/sluice-proxy/sluice/internal/clock"
)

// Options are a group's passive-health, slow-start and DNS settings, and the
// clock, randomness and logger it uses. The zero value is usable: every
// field has a default, stated with it. NewGroup copies the Options; changing
// them afterwards has no effect.
type Options struct {
	// MaxFails (default 3; < 0 turns the rule off) failures of a server
	// within FailTimeout mark it down for FailTimeout, as nginx's
	// max_fails. Failures that arrive while it is down are not counted,
	// nor are Slow ones (see FailureKind).
	MaxFails int
	// FailTimeout (default 10s) is both the window the MaxFails failures
	// must fall in (it starts at the first of them) and how long the server
	// is then down.
	FailTimeout time.Duration
	// Statuses are the response statuses that count as failures of the
	// server (default 502, 503, 504). A non-nil empty slice counts none.
	// Connection failures, timeouts and invalid responses always count.
	Statuses []int

	// ConsecutiveFailures (default 5; < 0 turns ejection off) failures in a
	// row, with no success between, eject the server (Envoy's outlier
	// detection) for BaseEjection times the number of times it has been
	// ejected, at most MaxEjection. The multiplier goes down by one for each
	// BaseEjection the server then spends without being ejected.
	ConsecutiveFailures int
	// BaseEjection (default 30s) is the first ejection's length.
	BaseEjection time.Duration
	// MaxEjection (default 300s) caps an ejection's length.
	MaxEjection time.Duration
	// MaxEjectedPercent (default 50, at most 100) caps the share of the
	// group's servers ejected at once: an ejection that would go over it
	// does not happen, so a bad deploy cannot eject everything. One server
	// of two may be ejected at 50; the only server of a group never is
	// below 100.
	MaxEjectedPercent int

	// NoProbe turns probes off (default false: probes on). A server that
	// MaxFails or ConsecutiveFailures took out is probed once half of its
	// down time or ejection has passed: the first Pick from then on that
	// looks at its tier (see Group.Pick) sends it that one try, provided no
	// other try is in flight to it and the request has not tried it. The
	// probe's Report decides. A success ends the down time and the
	// ejection at once: the server is announced healthy and slow-starts
	// from then. Any failure, Slow included, starts over the rules that
	// hold the server out, from the probe's end: down for FailTimeout
	// again, or ejected again as its next ejection (BaseEjection times the
	// new count, at most MaxEjection), with the next probe at half of that;
	// it counts toward nothing else. A Canceled probe gives no verdict, and
	// the next Pick probes instead. One probe at a time goes to a server,
	// however many Picks run at once. While a probe is in flight the
	// server's first report is taken for the probe's, which makes a
	// difference only in panic mode, when other tries may go to it too.
	//
	// A server failing its active checks is not probed: it returns when
	// its checks pass. Active checks do not end a passive down time, so one
	// that passes them but was taken out passively is probed like any
	// other. With NoProbe, a server taken out passively takes no request
	// (but in panic mode) until its time ends.
	NoProbe bool

	// SlowStart (default 0: off) is how long a server that comes back — at
	// the end of a fail_timeout or an ejection, after passing its active
	// checks again, or when it is added by DNS or a config reload — takes
	// to ramp its effective weight linearly from 10% to 100%.
	SlowStart time.Duration

	// Active turns on active health checks (default nil: none).
	Active *ActiveCheck

	// Resolver looks up the addresses of a DNS-named server (default
	// net.DefaultResolver.LookupNetIP with network "ip"). It must be safe
	// for concurrent use.
	Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

	// Now is the clock for every health and slow-start decision (default
	// the monotonic clock of internal/clock). Background work (active checks, DNS) waits on real timers.
	Now func() time.Time
	// Rand is the randomness of the P2C and Random policies and of the
	// active checks' jitter (default the math/rand/v2 global source). It
	// must be safe for concurrent use when the group is used concurrently.
	Rand rand.Source
	// Log receives one line per change of a server's health and per change
	// of a DNS name's addresses (default nil: no logging).
	Log *slog.Logger
	// OnChange, if set, is called after each change of a server's health,
	// for metrics. It may be called from several goroutines at once, must
	// not block, and must not call back into the group.
	OnChange func(s *Server, healthy bool)

	// dial, when set, connects an active check instead of sock.Dial: the
	// tests' in-memory connections, which a testing/synctest bubble can
	// wait on, where it cannot wait on a socket.
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Defaults of the Options.
const (
	DefaultMaxFails            = 3
	DefaultFailTimeout         = 10 * time.Second
	DefaultConsecutiveFailures = 5
	DefaultBaseEjection        = 30 * time.Second
	DefaultMaxEjection         = 300 * time.Second
	DefaultMaxEjectedPercent   = 50
	DefaultResolveInterval     = 10 * time.Second
)

// DefaultStatuses are the response statuses that count as failures when
// Options.Statuses is nil.
var DefaultStatuses = []int{502, 503, 504}

// withDefaults returns o with every unset field at its default.
func (o Options) withDefaults() Options {
	if o.MaxFails == 0 {
		o.MaxFails = DefaultMaxFails
	}
	if o.FailTimeout <= 0 {
		o.FailTimeout = DefaultFailTimeout
	}
	if o.Statuses == nil {
		o.Statuses = DefaultStatuses
	}
	if o.ConsecutiveFailures == 0 {
		o.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if o.BaseEjection <= 0 {
		o.BaseEjection = DefaultBaseEjection
	}
	if o.MaxEjection <= 0 {
		o.MaxEjection = DefaultMaxEjection
	}
	if o.MaxEjection < o.BaseEjection {
		o.MaxEjection = o.BaseEjection
	}
	if o.MaxEjectedPercent <= 0 {
		o.MaxEjectedPercent = DefaultMaxEjectedPercent
	}
	if o.MaxEjectedPercent > 100 {
		o.MaxEjectedPercent = 100
	}
	if o.SlowStart < 0 {
		o.SlowStart = 0
	}
	if o.Active != nil {
		a := o.Active.withDefaults()
		o.Active = &a
	}
	if o.Resolver == nil {
		o.Resolver = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if o.Now == nil {
		o.Now = clock.Now
	}
	return o
}
