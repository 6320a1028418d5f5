package cache

import (
	"strconv"
	"time"
)

// Cache-Status (RFC 9211): what the cache did with a request, in the
// field's own words.

// fwd is the reason a request went forward (RFC 9211 §2.2).
type fwd uint8

const (
	fwdNone     fwd = iota // a hit
	fwdBypass              // the cache was configured not to handle it
	fwdMethod              // the method is not cacheable
	fwdURIMiss             // nothing stored for the URI
	fwdVaryMiss            // stored, but not for the request's variant
	fwdMiss                // stored, but not usable (and not validated)
	fwdRequest             // the request asked for it (only-if-cached aside)
	fwdStale               // stored and stale: validated
)

var fwdNames = [...]string{fwdBypass: "bypass", fwdMethod: "method", fwdURIMiss: "uri-miss",
	fwdVaryMiss: "vary-miss", fwdMiss: "miss", fwdRequest: "request", fwdStale: "stale"}

// cacheStatus is one member of a Cache-Status field.
type cacheStatus struct {
	hit       bool
	fwd       fwd
	fwdStatus int
	ttl       time.Duration // remaining freshness; negative when stale
	hasTTL    bool
	stored    bool
	collapsed bool
	detail    string // a token
}

// appendTo appends the member, named name, to b.
func (c *cacheStatus) appendTo(b []byte, name string) []byte {
	b = append(b, name...)
	if c.hit {
		b = append(b, "; hit"...)
	} else if c.fwd != fwdNone {
		b = append(b, "; fwd="...)
		b = append(b, fwdNames[c.fwd]...)
		if c.fwdStatus > 0 {
			b = append(b, "; fwd-status="...)
			b = strconv.AppendInt(b, int64(c.fwdStatus), 10)
		}
	}
	if c.hasTTL {
		b = append(b, "; ttl="...)
		b = strconv.AppendInt(b, int64(c.ttl.Round(time.Second)/time.Second), 10)
	}
	if c.stored {
		b = append(b, "; stored"...)
	}
	if c.collapsed {
		b = append(b, "; collapsed"...)
	}
	if c.detail != "" {
		b = append(b, "; detail="...)
		b = append(b, c.detail...)
	}
	return b
}

// note is what the access log says of the request (cache=hit,
// cache=miss...): the same words.
func (c *cacheStatus) note() string {
	switch {
	case c.hit && c.detail != "":
		return c.detail // stale-while-revalidate, stale-if-error...
	case c.hit:
		return "hit"
	case c.fwd == fwdStale && c.detail != "":
		return c.detail
	case c.fwd == fwdStale:
		return "revalidated"
	case c.collapsed:
		return "collapsed"
	case c.fwd == fwdBypass, c.fwd == fwdMethod:
		return "bypass"
	}
	return "miss"
}
