package ratelimit

import (
	"crypto/sha256"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/proxy"
)

// Key says which budget a request spends from.
type Key interface {
	// AppendKey appends the request's key to dst. It is called from the
	// request's goroutine and must be safe for concurrent use.
	AppendKey(dst []byte, s *proxy.Session) []byte
}

// ClientIP keys requests by the client's IP address (Session.ClientIP;
// behind a trusted proxy, the address the connection came from, not
// X-Forwarded-For). An IPv6 client is keyed by its /64, the block one
// host or network is handed, so that a client cannot take a fresh budget
// with each of its addresses.
type ClientIP struct{}

// AppendKey implements Key.
func (ClientIP) AppendKey(dst []byte, s *proxy.Session) []byte { return appendClient(dst, s) }

func appendClient(dst []byte, s *proxy.Session) []byte {
	a := s.ClientIP
	switch {
	case !a.IsValid():
		return append(dst, s.Client...)
	case a.Is4In6():
		return a.Unmap().AppendTo(dst)
	case a.Is6():
		b := a.As16()
		clear(b[8:])
		return append(netip.AddrFrom16(b).AppendTo(dst), "/64"...)
	}
	return a.AppendTo(dst)
}

// Header keys requests by the value of a request header (an API key, a
// user id set by an authenticating proxy in front). A request without the
// header is keyed by its client's address instead, so that the clients
// that leave it out do not all share, and exhaust, one budget. The two
// kinds of key cannot collide: a header's value is keyed "h:" and the
// value, an address "ip:" and the address. A value longer than 64 bytes
// is keyed by its SHA-256 digest, so that a key's size stays bounded.
type Header struct {
	Name string
}

// maxKeyValue is the longest header value used as a key as it is.
const maxKeyValue = 64

// AppendKey implements Key.
func (h Header) AppendKey(dst []byte, s *proxy.Session) []byte {
	v := s.Request.Header.Get(h.Name)
	if v == nil {
		return appendClient(append(dst, "ip:"...), s)
	}
	dst = append(dst, "h:"...)
	if len(v) > maxKeyValue {
		sum := sha256.Sum256(v)
		return append(append(dst, "sha256:"...), sum[:16]...)
	}
	return append(dst, v...)
}

// Route keys every request alike: the route has one budget.
type Route struct{}

// AppendKey implements Key.
func (Route) AppendKey(dst []byte, _ *proxy.Session) []byte { return dst }

// Action is what a Limiter does with a request its store could not decide.
type Action uint8

const (
	// Allow lets the request through: a store failure does not take the
	// route down (the default).
	Allow Action = iota
	// Deny answers the request 503: no request goes unlimited.
	Deny
)

// DefaultPolicyName names the quota policy in the RateLimit fields when a
// Limiter's PolicyName is "".
const DefaultPolicyName = "default"

// storeLogEvery is the least time between two log lines of a Limiter
// about its store failing.
const storeLogEvery = 10 * time.Second

// Limiter is a route phase (a proxy.RequestFilter) that limits the rate
// of the requests it sees, per key, with the GCRA: a request over the
// limit is answered 429 Too Many Requests, with Retry-After (seconds,
// rounded up), a Proxy-Status naming the error http_request_denied (RFC
// 9209 §2.3.2), and the RateLimit-Policy and RateLimit fields of the
// IETF httpapi draft; its access log line ends rate_limited=true.
//
// A request the store cannot decide (Redis down or slower than its
// timeout) is let through or answered 503 as OnStoreError says, noted
// rate_limit_store=error in the access log, counted, and logged at most
// once every 10 seconds with the count of failures since.
//
// The fields must not change once the Limiter is in use; its methods are
// safe for concurrent use.
type Limiter struct {
	// Name names the limiter in logs and metrics: the route's host and
	// path prefix in the config-built proxy.
	Name   string
	Policy Policy
	// Key picks the budget a request spends from; nil means ClientIP.
	Key Key
	// Store keeps the budgets; nil means a Local store of its own with
	// DefaultMaxKeys.
	Store Store
	// OnStoreError is what happens to a request the store fails to
	// decide; Allow by default.
	OnStoreError Action
	// PolicyName names the quota policy in the RateLimit-Policy and
	// RateLimit fields; "" means DefaultPolicyName. It must be printable
	// ASCII without '"' or '\'.
	PolicyName string
	// Log receives the store failures; nil means slog.Default().
	Log *slog.Logger

	counts  *counts
	once    sync.Once
	policy  string // the RateLimit-Policy field value
	policyb []byte // the same, for AddResponseField
	pname   string // the policy's name as a structured-field string
	detail  string // the Proxy-Status details
}

// counts are a Limiter's decisions, carried from one Limiter to the one
// that replaces it (Carry).
type counts struct {
	allowed, limited, storeError atomic.Uint64

	mu         sync.Mutex
	nextLog    time.Time // before it, store failures are counted, not logged
	suppressed int       // store failures not logged since the last line
}

// Counts are the decisions a Limiter took.
type Counts struct {
	Allowed    uint64 // requests let through by the limit
	Limited    uint64 // requests answered 429
	StoreError uint64 // requests the store could not decide (let through or answered 503)
}

// Counts returns the decisions taken so far, those of the Limiters it
// carried on from included.
func (l *Limiter) Counts() Counts {
	c := l.init()
	return Counts{Allowed: c.allowed.Load(), Limited: c.limited.Load(), StoreError: c.storeError.Load()}
}

// Carry makes l go on from old, the Limiter it replaces (a config reload):
// l's counts continue old's, and when both keep their state in a Local
// store, l takes old's, so that a reload does not hand every client a
// whole budget again. Call it before l is in use.
func (l *Limiter) Carry(old *Limiter) {
	if old == nil {
		return
	}
	l.counts = old.init()
	if ol, ok := old.Store.(*Local); ok {
		if _, ok := l.Store.(*Local); ok {
			l.Store = ol
		}
	}
}

// init works out what the Limiter writes on every answer, once.
func (l *Limiter) init() *counts {
	l.once.Do(func() {
		if l.counts == nil {
			l.counts = new(counts)
		}
		if l.Store == nil {
			l.Store = NewLocal(0)
		}
		name := l.PolicyName
		if name == "" {
			name = DefaultPolicyName
		}
		l.pname = strconv.Quote(name)
		// draft-ietf-httpapi-ratelimit-headers-11 §3.1: the quota q over a
		// window of w seconds. The window is the rate's period, so q is
		// the steady rate; the burst on top of it is sluice's own
		// parameter, prefixed as §3.1 asks of those.
		l.policy = l.pname + ";q=" + strconv.FormatInt(l.Policy.Rate.Count, 10) +
			";w=" + strconv.FormatInt(int64(l.Policy.Rate.Period/time.Second), 10) +
			";sluice-burst=" + strconv.FormatInt(l.Policy.burst(), 10)
		l.policyb = []byte(l.policy)
		l.detail = strconv.Quote("rate limit " + l.Policy.Rate.String() + " burst " +
			strconv.FormatInt(l.Policy.burst(), 10) + " exceeded")
	})
	return l.counts
}

// keyBuf holds a request's key while the store reads it.
var keyBuf = sync.Pool{New: func() any { b := make([]byte, 0, 64); return &b }}

// RequestFilter implements proxy.RequestFilter.
func (l *Limiter) RequestFilter(s *proxy.Session) *proxy.Response {
	c := l.init()
	if l.Policy.Rate.Count <= 0 || l.Policy.Rate.Period <= 0 {
		// No rate (a zero Policy): nothing to limit.
		c.allowed.Add(1)
		return nil
	}
	bp := keyBuf.Get().(*[]byte)
	key := *bp
	if l.Key == nil {
		key = appendClient(key[:0], s)
	} else {
		key = l.Key.AppendKey(key[:0], s)
	}
	now := s.Start // read when the request head was, saving a clock read
	if now.IsZero() {
		now = time.Now()
	}
	d, err := l.Store.Take(key, l.Policy, now)
	*bp = key[:0]
	keyBuf.Put(bp)
	switch {
	case err != nil:
		c.storeError.Add(1)
		s.Note("rate_limit_store", "error")
		l.logStoreError(c, err)
		if l.OnStoreError == Deny {
			return l.storeDenied()
		}
		return nil
	case !d.Allowed:
		c.limited.Add(1)
		s.Note("rate_limited", "true")
		return l.tooMany(d)
	}
	c.allowed.Add(1)
	l.tell(s, d)
	return nil
}

var (
	rateLimitPolicyName = []byte("RateLimit-Policy")
	rateLimitName       = []byte("RateLimit")
)

// tell puts the RateLimit fields on the response to an allowed request
// (draft-ietf-httpapi-ratelimit-headers-11 §4.1): r, the requests the key
// may still make now; t, the seconds until its budget is whole again.
// Built on the stack, copied into the session: no allocation.
func (l *Limiter) tell(s *proxy.Session, d Decision) {
	s.AddResponseField(rateLimitPolicyName, l.policyb)
	var arr [96]byte
	b := append(arr[:0], l.pname...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, ceilSeconds(d.Reset), 10)
	s.AddResponseField(rateLimitName, b)
}

// tooMany is the answer to a request over the limit.
func (l *Limiter) tooMany(d Decision) *proxy.Response {
	secs := strconv.FormatInt(ceilSeconds(d.RetryAfter), 10)
	r := &proxy.Response{Status: 429, Body: []byte("429 Too Many Requests (rate limited)\n")}
	r.Header.Add("Content-Type", "text/plain; charset=utf-8")
	r.Header.Add("Cache-Control", "no-store")
	r.Header.Add("Retry-After", secs)
	r.Header.Add("RateLimit-Policy", l.policy)
	// draft-ietf-httpapi-ratelimit-headers-11 §4.1: r, the quota left,
	// none; t, the seconds in which no more than r may be used: until
	// the next request would be allowed, as Retry-After says (§6: a
	// Retry-After no earlier than the end of that window).
	r.Header.Add("RateLimit", l.pname+";r=0;t="+secs)
	r.Header.Add("Proxy-Status", "sluice; error=http_request_denied; details="+l.detail)
	return r
}

// storeDenied is the answer to a request the store could not decide, when
// OnStoreError is Deny.
func (l *Limiter) storeDenied() *proxy.Response {
	r := &proxy.Response{Status: 503, Body: []byte("503 Service Unavailable (rate limit store unavailable)\n")}
	r.Header.Add("Content-Type", "text/plain; charset=utf-8")
	r.Header.Add("Cache-Control", "no-store")
	r.Header.Add("Retry-After", "1")
	r.Header.Add("Proxy-Status", `sluice; error=proxy_internal_error; details="rate limit store unavailable"`)
	return r
}

// logStoreError logs a store failure, unless one was logged less than
// storeLogEvery ago: then it is counted, and the next line says how many
// were left out.
func (l *Limiter) logStoreError(c *counts, err error) {
	now := time.Now()
	c.mu.Lock()
	if now.Before(c.nextLog) {
		c.suppressed++
		c.mu.Unlock()
		return
	}
	c.nextLog = now.Add(storeLogEvery)
	suppressed := c.suppressed
	c.suppressed = 0
	c.mu.Unlock()
	log := l.Log
	if log == nil {
		log = slog.Default()
	}
	action := "allowing"
	if l.OnStoreError == Deny {
		action = "denying (503)"
	}
	log.Error("rate limit store failed; "+action+" the requests it cannot decide",
		"limiter", l.Name, "error", err.Error(), "suppressed", suppressed)
}

// ceilSeconds rounds d up to whole seconds, at least 1: a Retry-After of
// 0 would invite the client straight back.
func ceilSeconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}

// ParseKey reads a key kind as the config writes it: "client_ip",
// "route", or "header:NAME".
func ParseKey(s string) (Key, bool) {
	switch s {
	case "client_ip":
		return ClientIP{}, true
	case "route":
		return Route{}, true
	}
	if name, ok := strings.CutPrefix(s, "header:"); ok && validFieldName(name) {
		return Header{Name: name}, true
	}
	return nil, false
}

// validFieldName reports whether name is a field name (RFC 9110 §5.1: a
// token).
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
