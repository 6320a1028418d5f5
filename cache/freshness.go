package cache

import (
	"bytes"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// Freshness (RFC 9111 §4.2): how long a stored response is fresh, and how
// old it is.

// heuristicMax bounds a heuristic freshness lifetime (RFC 9111 §4.2.2):
// 10% of the time since Last-Modified, at most a day, so that a file last
// changed years ago is not kept unchecked for months.
const heuristicMax = 24 * time.Hour

// freshness is what a cache needs to know of a stored response's age and
// lifetime, worked out once when it is stored (or freshened by a 304).
type freshness struct {
	// lifetime is the freshness lifetime; zero for a response stale on
	// arrival (no-cache is kept apart, in noCache).
	lifetime time.Duration
	// initialAge is corrected_initial_age (§4.2.3); responseTime is when
	// the response arrived: current_age = initialAge + (now - responseTime).
	initialAge   time.Duration
	responseTime time.Time
	// staleIfError and staleWhileRevalidate are the response's RFC 5861
	// windows past its lifetime; -1 when it gives none.
	staleIfError, staleWhileRevalidate time.Duration
	// noCache: every use must be validated first (no-cache unqualified).
	noCache bool
	// mustRevalidate: once stale, never served without validation
	// (must-revalidate, proxy-revalidate, s-maxage: §4.2.4, §5.2.2.2,
	// §5.2.2.8, §5.2.2.10), not even when the origin fails.
	mustRevalidate bool
	// heuristic is set when lifetime comes from Last-Modified alone.
	heuristic bool
}

// age returns the response's current age at now (§4.2.3).
func (f *freshness) age(now time.Time) time.Duration {
	return f.initialAge + max(0, now.Sub(f.responseTime))
}

// fresh reports whether the response is fresh at now (§4.2).
func (f *freshness) fresh(now time.Time) bool {
	return !f.noCache && f.lifetime > f.age(now)
}

// staleBy returns how long past its lifetime the response is at now.
func (f *freshness) staleBy(now time.Time) time.Duration {
	return max(0, f.age(now)-f.lifetime)
}

// respView is a response's caching fields, parsed once: the
// Cache-Control, and the Surrogate-Control directives that apply to this
// cache, which replace Cache-Control's for it when there are any (as
// Fastly and Akamai read them).
type respView struct {
	cc, sc    directives
	surrogate bool // sc has directives for this cache and governs
}

// eff returns the directives that govern this cache.
func (v *respView) eff() *directives {
	if v.surrogate {
		return &v.sc
	}
	return &v.cc
}

// parse reads the caching fields of h; token is this cache's device token
// for Surrogate-Control ("" ignores Surrogate-Control).
func (v *respView) parse(h *h1.Header, token string) {
	parseCacheControl(&v.cc, h)
	v.sc.reset()
	v.surrogate = false
	if token == "" {
		return
	}
	for i := 0; i < h.Len(); i++ {
		if h1.EqualFold(h.Name(i), "Surrogate-Control") {
			parseDirectives(&v.sc, h.Value(i), token)
		}
	}
	v.surrogate = v.sc.any && (v.sc.maxAge >= 0 || v.sc.has(dirNoStore|dirMaxAgeBad))
}

// computeFreshness works out the freshness of a response received at
// respTime for a request sent at reqTime (§4.2.1, §4.2.3). With heuristic
// set, a response without explicit freshness that may be cached
// heuristically gets 10% of the time since its Last-Modified.
func computeFreshness(v *respView, status int, h *h1.Header, reqTime, respTime time.Time, heuristic bool) freshness {
	d := v.eff()
	f := freshness{responseTime: respTime, staleIfError: -1, staleWhileRevalidate: -1}
	date, dateOK := singleDate(h, "Date")
	if !dateOK {
		date = respTime
	}
	// Age (§4.2.3), with an Age that is not one non-negative integer
	// taken as stale (see ageValue).
	ageVal, ageOK := ageValue(h)
	apparent := max(0, respTime.Sub(date))
	corrected := time.Duration(ageVal)*time.Second + max(0, respTime.Sub(reqTime))
	f.initialAge = max(apparent, corrected)
	if !ageOK {
		f.initialAge = deltaMax * time.Second
	}

	switch {
	case d.has(dirSMaxAgeBad) || d.has(dirMaxAgeBad) && d.sMaxAge < 0:
		// An invalid argument: stale (§4.2.1 encourages it).
	case d.sMaxAge >= 0:
		f.lifetime = time.Duration(d.sMaxAge) * time.Second
	case d.maxAge >= 0:
		f.lifetime = time.Duration(d.maxAge) * time.Second
	case !v.surrogate && h.Has("Expires"):
		// An invalid Expires, "0" say, is in the past (§5.3), and so is
		// one of two Expires fields.
		if exp, ok := singleDate(h, "Expires"); ok {
			f.lifetime = max(0, exp.Sub(date))
		}
	case heuristic && heuristicStatus(status, d):
		if lm, ok := singleDate(h, "Last-Modified"); ok && lm.Before(date) {
			f.lifetime = min(date.Sub(lm)/10, heuristicMax)
			f.heuristic = true
		}
	}
	if d.staleIfError >= 0 {
		f.staleIfError = time.Duration(d.staleIfError) * time.Second
	}
	if d.staleWhileRevalidate >= 0 {
		f.staleWhileRevalidate = time.Duration(d.staleWhileRevalidate) * time.Second
	}
	f.noCache = d.has(dirNoCache)
	f.mustRevalidate = d.has(dirMustRevalidate) || d.has(dirProxyRevalidate) || d.sMaxAge >= 0
	return f
}

// explicit reports whether the response says how long it is fresh
// (§4.2.1): s-maxage, max-age or Expires, valid or not.
func explicit(v *respView, h *h1.Header) bool {
	d := v.eff()
	return d.sMaxAge >= 0 || d.maxAge >= 0 || d.has(dirMaxAgeBad|dirSMaxAgeBad) ||
		(!v.surrogate && h.Has("Expires"))
}

// heuristicStatus reports whether a response of this status may be given
// heuristic freshness (RFC 9110 §15.1: heuristically cacheable), or says
// public.
func heuristicStatus(status int, d *directives) bool {
	switch status {
	case 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501:
		return true
	}
	return d.has(dirPublic)
}

// understood reports whether sluice understands a status's caching
// requirements: the statuses RFC 9110 defines (must-understand, RFC 9111
// §5.2.2.3).
func understood(status int) bool {
	switch status {
	case 200, 201, 202, 203, 204, 205, 206,
		300, 301, 302, 303, 304, 305, 307, 308,
		400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 421, 422, 426,
		500, 501, 502, 503, 504, 505:
		return true
	}
	return false
}

// ageValue returns the response's Age in seconds. An Age that is not one
// non-negative integer, in one field line (a list, a sign, a fraction, a
// parameter, two lines), is not ok: RFC 9111 §5.1 says to use a list's
// first member and to ignore an invalid value, which could serve a
// response an upstream cache already held past its lifetime; sluice reads
// it as stale instead, as the cache-tests suite asks.
func ageValue(h *h1.Header) (int64, bool) {
	i := h.Index("Age")
	if i < 0 {
		return 0, true
	}
	if h.Count("Age") > 1 {
		return 0, false
	}
	n, ok := deltaSeconds(h.Value(i), false)
	if !ok || bytes.IndexByte(h.Value(i), '+') >= 0 {
		return 0, false
	}
	return n, true
}

// singleDate returns the value of a date field that appears once; a second
// field line, or a value that is not a date, is not ok.
func singleDate(h *h1.Header, name string) (time.Time, bool) {
	i := h.Index(name)
	if i < 0 || h.Count(name) > 1 {
		return time.Time{}, false
	}
	return parseDate(h.Value(i))
}
