package cache

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// What may be stored (RFC 9111 §3), and what of it.

// storable decides whether the response to the session's GET may be
// stored, and if not says why, in a word for Cache-Status's detail.
func (c *Cache) storable(s *proxy.Session, resp *h1.Response, v *respView) (bool, string) {
	d := v.eff()
	h := &resp.Header
	st := resp.Status
	switch {
	case st < 200 || st == 206 || st == 304:
		return false, "status" // interim, partial (not stored), or a 304 to the client's own condition
	case d.has(dirMustUnderstand) && !understood(st):
		return false, "must-understand" // §5.2.2.3
	case d.has(dirNoStore) && !(d.has(dirMustUnderstand) && understood(st)):
		return false, "no-store" // §5.2.2.5; must-understand overrides it for a status understood
	case d.has(dirPrivate):
		return false, "private" // §5.2.2.7: a shared cache
	}
	if s.Request.Header.Has("Authorization") && !allowsAuthorization(v) {
		return false, "authorization" // §3.5
	}
	if !explicit(v, h) && !d.has(dirPublic) && !heuristicStatus(st, d) {
		return false, "no-freshness" // §3: nothing says it may be reused
	}
	if _, star := varyNames(h); star {
		return false, "vary-star" // §4.1: it would never match
	}
	if h.Has("Set-Cookie") && !fieldListed(d, "set-cookie") {
		// A response that sets a cookie is one client's; see the
		// README's cookie rule. The origin may share the rest of it by
		// naming Set-Cookie in no-cache="..." or private="...".
		return false, "set-cookie"
	}
	if n, ok := contentLength(h); ok && n > c.maxObject {
		return false, "too-large"
	}
	return true, ""
}

// allowsAuthorization reports whether a response to a request with
// Authorization may be stored and reused for others (§3.5).
func allowsAuthorization(v *respView) bool {
	d := v.eff()
	return d.has(dirPublic) || d.has(dirMustRevalidate) || d.sMaxAge >= 0
}

// fieldListed reports whether name is listed by a qualified no-cache or
// private directive, which a shared cache honours by not storing the
// field.
func fieldListed(d *directives, name string) bool {
	return slices.Contains(d.noCacheFields, name) || slices.Contains(d.privateFields, name)
}

// unstored are the fields a cache must not store (§3.1): the hop-by-hop
// ones (which the engine removes before a phase sees the response, the
// ones Connection names included), those that frame the message as it
// came, and those a proxy gets for itself.
var unstored = [...]string{"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Transfer-Encoding",
	"Upgrade", "Proxy-Authenticate", "Proxy-Authentication-Info", "Proxy-Authorization", "Trailer"}

// newMeta makes the Meta a response is stored with: its head without the
// fields not stored, its tags, and when it was asked for and received.
func (c *Cache) newMeta(url string, resp *h1.Response, v *respView, reqTime, respTime time.Time) *Meta {
	d := v.eff()
	m := &Meta{URL: url, Status: resp.Status, Reason: string(resp.Reason()), RequestTime: reqTime, ResponseTime: respTime}
	h := &resp.Header
	m.Header.Grow(h.Len(), int(fieldsLen(h)))
	for i := 0; i < h.Len(); i++ {
		name := h.Name(i)
		if unstoredField(name) {
			continue
		}
		if len(d.noCacheFields)+len(d.privateFields) > 0 && fieldListed(d, strings.ToLower(string(name))) {
			continue // no-cache="X", private="X": the rest is stored (§5.2.2.4, §5.2.2.7)
		}
		m.Header.AddBytes(name, h.Value(i))
	}
	m.Tags = tags(h)
	names, _ := varyNames(h)
	m.Vary = names
	fr := computeFreshness(v, m.Status, &m.Header, reqTime, respTime, c.heuristic)
	m.fr = &fr
	m.Discard = c.discard(&fr, &m.Header)
	m.served = servedFields(m)
	return m
}

// discard is when a response stops being worth keeping: never while it
// can be validated, else once it is stale past every window in which it
// could still answer.
func (c *Cache) discard(fr *freshness, h *h1.Header) time.Time {
	if h.Has("ETag") || h.Has("Last-Modified") {
		return time.Time{}
	}
	keep := fr.lifetime - fr.initialAge + max(fr.staleIfError, fr.staleWhileRevalidate, c.sie, c.swr, 0)
	return fr.responseTime.Add(max(keep, 0) + time.Second)
}

func unstoredField(name []byte) bool {
	for _, u := range unstored {
		if h1.EqualFold(name, u) {
			return true
		}
	}
	return false
}

// internalFields are the stored fields a client never gets: the tags
// (Fastly's Surrogate-Key, Cloudflare's Cache-Tag) and Surrogate-Control,
// which are for this cache.
var internalFields = [...]string{"Surrogate-Key", "Cache-Tag", "Surrogate-Control"}

func internalField(name []byte) bool {
	for _, f := range internalFields {
		if h1.EqualFold(name, f) {
			return true
		}
	}
	return false
}

// tags returns the tags of a response: Surrogate-Key's, separated by
// spaces, and Cache-Tag's, by commas.
func tags(h *h1.Header) []string {
	var ts []string
	for i := 0; i < h.Len(); i++ {
		switch name := h.Name(i); {
		case h1.EqualFold(name, "Surrogate-Key"):
			for _, t := range bytes.Fields(h.Value(i)) {
				ts = appendTag(ts, t)
			}
		case h1.EqualFold(name, "Cache-Tag"):
			for v := h.Value(i); len(v) > 0; {
				var t []byte
				t, v = h1.CutList(v)
				ts = appendTag(ts, t)
			}
		}
	}
	return ts
}

func appendTag(ts []string, t []byte) []string {
	if len(t) == 0 || len(t) > 1024 || slices.Contains(ts, string(t)) {
		return ts
	}
	return append(ts, string(t))
}

// noUpdate are the fields a 304 does not change in the stored response:
// those that describe the stored body as it is (§3.2 lets a cache keep
// what assures its integrity), and the validator the 304 was for.
var noUpdate = [...]string{"Content-Length", "Content-Encoding", "Content-Range", "Content-MD5", "ETag"}

// freshen returns the Meta of a stored response updated by a 304 (or
// another response to a validation that says it is current: §4.3.4):
// each field the 304 carries replaces the stored ones of its name, but
// those in noUpdate and those not stored; the times are the
// validation's.
func (c *Cache) freshen(old *Meta, resp *h1.Response, reqTime, respTime time.Time) *Meta {
	m := &Meta{URL: old.URL, Status: old.Status, Reason: old.Reason, Size: old.Size,
		RequestTime: reqTime, ResponseTime: respTime, Vary: old.Vary}
	m.Trailer.CopyFrom(&old.Trailer)
	nh := &resp.Header
	replaced := func(name []byte) bool {
		if unstoredField(name) || noUpdateField(name) {
			return false
		}
		return nh.Has(string(name))
	}
	for i := 0; i < old.Header.Len(); i++ {
		if name := old.Header.Name(i); !replaced(name) {
			m.Header.AddBytes(name, old.Header.Value(i))
		}
	}
	for i := 0; i < nh.Len(); i++ {
		// A Set-Cookie is for the client that triggered the validation,
		// never stored (see storable).
		if name := nh.Name(i); !unstoredField(name) && !noUpdateField(name) && !h1.EqualFold(name, "Set-Cookie") {
			m.Header.AddBytes(name, nh.Value(i))
		}
	}
	var v respView
	v.parse(&m.Header, c.token)
	d := v.eff()
	if len(d.noCacheFields)+len(d.privateFields) > 0 {
		for i := m.Header.Len() - 1; i >= 0; i-- {
			if fieldListed(d, strings.ToLower(string(m.Header.Name(i)))) {
				m.Header.DelAt(i)
			}
		}
	}
	m.Tags = tags(&m.Header)
	fr := computeFreshness(&v, m.Status, &m.Header, reqTime, respTime, c.heuristic)
	m.fr = &fr
	m.Discard = c.discard(&fr, &m.Header)
	m.served = servedFields(m)
	return m
}

func noUpdateField(name []byte) bool {
	for _, u := range noUpdate {
		if h1.EqualFold(name, u) {
			return true
		}
	}
	return false
}

// freshnessOf returns the freshness of a stored response: the one worked
// out when it was stored, or for a Meta read back from storage, anew.
func (c *Cache) freshnessOf(m *Meta) freshness {
	if m.fr != nil {
		return *m.fr
	}
	var v respView
	v.parse(&m.Header, c.token)
	return computeFreshness(&v, m.Status, &m.Header, m.RequestTime, m.ResponseTime, c.heuristic)
}

// contentLength returns a response's Content-Length when it has one
// valid value.
func contentLength(h *h1.Header) (int64, bool) {
	i := h.Index("Content-Length")
	if i < 0 || h.Count("Content-Length") > 1 {
		return 0, false
	}
	return h1.ParseDecimal(h.Value(i))
}
