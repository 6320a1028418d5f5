package cache

import (
	"net/url"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// The cache as a route phase: what it does at each hook of the main line.

// request is the cache's state for one request (Session.SetValue), and
// the tee that stores its response.
type request struct {
	c       *Cache
	s       *proxy.Session
	primary string // the primary key
	url     string
	reqTime time.Time
	// stale is a stored response to validate, or to answer with when the
	// upstream fails; staleKey the key it is stored under.
	stale    *Object
	staleKey string
	// revalidate: the request upstream carries stale's validators.
	revalidate bool
	// store: the response may be stored (a GET without no-store).
	store bool
	// invalidate: a non-error answer to this unsafe method invalidates
	// what is stored for its URL, Location and Content-Location (§4.4).
	invalidate bool
	flight     *flight // the flight this request writes, if it holds one
	fill       *fill   // the response being stored
	key        string  // the key the response is stored under
	status     cacheStatus
	statusSent bool // Cache-Status is on the answer already
	background bool // a spawned revalidation: no client waits
}

type stateKey struct{}

func state(s *proxy.Session) *request {
	st, _ := s.Value(stateKey{}).(*request)
	return st
}

// RequestFilter answers the request from the store when it can (a fresh
// response, or a stale one while a background request revalidates it),
// waits for another request's fetch of the same key (collapsed
// forwarding), or readies the request to go upstream: to validate a stale
// response, or to fetch one to store.
func (c *Cache) RequestFilter(s *proxy.Session) *proxy.Response {
	method := s.Request.Method()
	if method != "GET" && method != "HEAD" {
		st := &request{c: c, s: s, invalidate: !safeMethod(method)}
		st.status.fwd = fwdMethod
		s.SetValue(stateKey{}, st)
		c.counts.bypass.Add(1)
		s.Note("cache", "bypass")
		return nil
	}
	now := time.Now()
	if st := state(s); st != nil && st.background {
		return nil // a spawned revalidation, readied by revalidateInBackground
	}
	req := &s.Request.Header
	var reqCC directives
	parseCacheControl(&reqCC, req)
	if originOnly(req) {
		// If-Match, If-Unmodified-Since: for the origin to evaluate.
		st := &request{c: c, s: s, reqTime: now}
		st.status.fwd = fwdRequest
		s.SetValue(stateKey{}, st)
		c.counts.bypass.Add(1)
		s.Note("cache", "bypass")
		return nil
	}
	b := c.key.appendPrimary(s.Scratch(), s)
	primary := string(b)
	s.KeepScratch(b)

	obj, key, fwd, err := c.lookup(s, primary)
	if err != nil {
		c.log.Error("cache: store lookup failed", "cache", c.name, "key", primary, "error", err)
	}
	auth := req.Has("Authorization")
	var fr freshness
	if obj != nil {
		fr = c.freshnessOf(obj.Meta)
		switch {
		case auth && !c.allowsAuthorizationMeta(obj.Meta):
			obj.Close()
			obj, fwd = nil, fwdMiss
		case fr.fresh(now):
			// A hit: no state is kept for the request.
			c.counts.hits.Add(1)
			status := cacheStatus{hit: true}
			return c.respond(s, obj, &fr, now, &status)
		case c.whileRevalidate(&fr, now) && method == "GET":
			// Stale, within stale-while-revalidate: the stale response
			// answers now, and one request revalidates it in the
			// background, unless one is at it already.
			c.revalidateInBackground(s, primary, key, obj)
			c.counts.stale.Add(1)
			status := cacheStatus{hit: true, detail: "stale-while-revalidate"}
			return c.respond(s, obj, &fr, now, &status)
		}
	}
	st := &request{c: c, s: s, reqTime: now, primary: primary}
	s.SetValue(stateKey{}, st)
	st.store = method == "GET" && !reqCC.has(dirNoStore)
	if obj != nil {
		st.stale, st.staleKey = obj, key
		st.revalidate = hasValidators(obj.Meta) && method == "GET"
		fwd = fwdStale
	}
	st.status.fwd = fwd
	if reqCC.has(dirOnlyIfCached) {
		// §5.2.1.7: nothing stored may answer it, and it must not go
		// upstream.
		st.closeStale()
		s.Note("cache", "miss")
		c.counts.misses.Add(1)
		return proxy.Text(504, "504 Gateway Timeout: not in the cache (only-if-cached)\n")
	}
	s.Tee(st, st.store)
	if method == "GET" && !auth && c.lockTimeout > 0 && st.store &&
		(st.revalidate || st.stale == nil && !conditional(req) && !req.Has("Range")) {
		lockKey := key
		if st.stale != nil {
			lockKey = st.staleKey
		}
		if !c.locks.memory.has(lockKey) {
			if r := c.collapse(st, lockKey); r != nil {
				return r
			}
		}
	}
	if st.stale == nil {
		c.counts.misses.Add(1)
	}
	return nil
}

// lookup returns what the store holds for the request: the response under
// its primary key, or under its variant key when a Vary marker says the
// key's responses vary (§4.1); and when nothing is there, the key it would
// be stored under as far as is known and why it is a miss.
func (c *Cache) lookup(s *proxy.Session, primary string) (*Object, string, fwd, error) {
	obj, err := c.store.Get(primary)
	if err != nil || obj == nil {
		return nil, primary, fwdURIMiss, err
	}
	if !obj.Meta.Marker {
		return obj, primary, fwdNone, nil
	}
	names := obj.Meta.Vary
	obj.Close()
	vk := variance(primary, &s.Request.Header, names)
	obj, err = c.store.Get(vk)
	if err != nil || obj == nil {
		return nil, vk, fwdVaryMiss, err
	}
	return obj, vk, fwdNone, nil
}

// collapse waits, at most the lock's timeout, on the request that is
// fetching key for another (collapsed forwarding), and returns the answer
// made of what it got; or nil for the request to go upstream: as the
// writer of key's flight (st.flight), or on its own.
func (c *Cache) collapse(st *request, key string) *proxy.Response {
	s := st.s
	deadline := time.Now().Add(c.lockTimeout)
	for {
		f, writer := c.locks.acquire(key)
		if writer {
			st.flight = f
			return nil
		}
		if !f.wait(deadline) {
			st.status.detail = "lock-timeout"
			return nil
		}
		switch f.outcome {
		case filling:
			if r := c.fromFill(st, f.fill); r != nil {
				c.counts.collapsed.Add(1)
				st.closeStale()
				return r
			}
			return nil // another variant: upstream, at once
		case uncacheable:
			return nil
		case stored, erred:
			now := time.Now()
			obj, _, _, _ := c.lookup(s, st.primary)
			if obj != nil {
				fr := c.freshnessOf(obj.Meta)
				if fr.fresh(now) {
					c.counts.collapsed.Add(1)
					st.closeStale()
					st.status = cacheStatus{hit: true, collapsed: true}
					return c.respond(s, obj, &fr, now, &st.status)
				}
				if f.outcome == erred && c.ifError(&fr, now) {
					c.counts.stale.Add(1)
					st.closeStale()
					st.status = cacheStatus{fwd: fwdStale, collapsed: true, detail: "stale-if-error"}
					return c.respond(s, obj, &fr, now, &st.status)
				}
				obj.Close()
			}
		}
		if !time.Now().Before(deadline) {
			st.status.detail = "lock-timeout"
			return nil
		}
	}
}

// fromFill returns the answer to the session's request made of a response
// being stored, its body read as it arrives; nil when the response is not
// for this request (another variant).
func (c *Cache) fromFill(st *request, fl *fill) *proxy.Response {
	m := fl.meta
	mine := st.primary
	if len(m.Vary) > 0 {
		mine = variance(st.primary, &st.s.Request.Header, m.Vary)
	}
	if mine != fl.key {
		return nil
	}
	st.status = cacheStatus{fwd: st.status.fwd, collapsed: true}
	if st.status.fwd == fwdNone || st.status.fwd == fwdStale {
		st.status.fwd = fwdMiss
	}
	r := &proxy.Response{Status: m.Status, AsUpstream: true}
	fr := c.freshnessOf(m)
	age := fr.age(time.Now())
	st.status.ttl, st.status.hasTTL = fr.lifetime-age, true
	c.head(&r.Header, m, age, &st.status)
	size := int64(-1)
	if n, ok := contentLength(&m.Header); ok {
		size = n
	}
	dropFields(&r.Header, "Content-Length")
	r.Stream = &proxy.StreamBody{Reader: fl.reader(r), Size: size}
	st.statusSent = true
	st.s.Note("cache", "collapsed")
	return r
}

// UpstreamRequestFilter makes a revalidation conditional (§4.3.1): the
// stale response's validators replace the client's preconditions (which
// are evaluated against the result), and its Range goes too, so that a
// changed response comes whole, to be stored. Every request upstream
// says which Surrogate-Control directives this cache honours.
func (c *Cache) UpstreamRequestFilter(s *proxy.Session, _ *proxy.Peer, req *h1.Request) {
	st := state(s)
	if st == nil || st.invalidate {
		return
	}
	h := &req.Header
	if v := h.Get("Surrogate-Capability"); v != nil {
		h.Set("Surrogate-Capability", string(v)+", "+c.capability)
	} else {
		h.Add("Surrogate-Capability", c.capability)
	}
	if !st.revalidate {
		return
	}
	for _, f := range conditionalFields {
		if h.Has(f) {
			h.Del(f)
		}
	}
	if h.Has("Range") {
		h.Del("Range")
	}
	m := st.stale.Meta
	if etag := m.Header.Get("ETag"); etag != nil {
		h.AddBytes([]byte("If-None-Match"), etag)
	}
	if lm := m.Header.Get("Last-Modified"); lm != nil {
		h.AddBytes([]byte("If-Modified-Since"), lm)
	}
}

// UpstreamResponseFilter acts on the upstream's answer before the
// response phases see it: a 304 to a revalidation freshens the stored
// response, which answers (§4.3.3); a 5xx answer is replaced by a stale
// response where stale-if-error allows; a storable response begins to be
// stored as it is relayed; an unsafe method's success invalidates (§4.4).
func (c *Cache) UpstreamResponseFilter(s *proxy.Session, _ *proxy.Peer, resp *h1.Response) *proxy.Response {
	st := state(s)
	if st == nil {
		return nil
	}
	now := time.Now()
	if st.invalidate {
		if resp.Status < 400 {
			c.invalidate(s, resp)
		}
		c.addStatus(st, resp)
		return nil
	}
	if st.stale != nil {
		switch {
		case resp.Status == 304 && st.revalidate:
			m := c.freshen(st.stale.Meta, resp, st.reqTime, now)
			if err := c.store.Update(st.staleKey, m); err != nil {
				c.log.Error("cache: store update failed", "cache", c.name, "url", st.URL(), "error", err)
			}
			st.release(stored)
			c.counts.revalidated.Add(1)
			obj := &Object{Meta: m, Body: st.stale.Body}
			st.stale = nil
			if st.background {
				obj.Close()
				return nil
			}
			st.status = cacheStatus{fwd: fwdStale, fwdStatus: 304}
			st.statusSent = true
			fr := *m.fr
			r := c.respond(s, obj, &fr, now, &st.status)
			for i := 0; i < resp.Header.Len(); i++ {
				// This client's cookie, which the stored response keeps
				// for nobody.
				if h1.EqualFold(resp.Header.Name(i), "Set-Cookie") {
					r.Header.AddBytes(resp.Header.Name(i), resp.Header.Value(i))
				}
			}
			return r
		case serverError(resp.Status) && !st.background:
			if r := c.staleOnError(st, resp.Status, now); r != nil {
				return r
			}
		}
	}
	if st.background && serverError(resp.Status) {
		st.release(erred)
		return nil
	}
	if st.stale != nil && !st.background {
		c.counts.misses.Add(1) // a stale response the upstream's answer replaces
	}
	c.begin(st, resp, now)
	c.addStatus(st, resp)
	stripInternal(&resp.Header)
	return nil
}

// begin decides whether the response to st's request is stored, and if
// so starts gathering it (the tee feeds the fill) and lets the waiters on
// its flight read it as it comes.
func (c *Cache) begin(st *request, resp *h1.Response, now time.Time) {
	if !st.store {
		st.release(uncacheable)
		return
	}
	var v respView
	v.parse(&resp.Header, c.token)
	ok, why := c.storable(st.s, resp, &v)
	if !ok {
		st.status.detail = why
		c.counts.uncacheable.Add(1)
		st.release(uncacheable)
		return
	}
	m := c.newMeta(st.URL(), resp, &v, st.reqTime, now)
	st.key = st.primary
	if len(m.Vary) > 0 {
		st.key = variance(st.primary, &st.s.Request.Header, m.Vary)
	}
	size := int64(-1)
	if n, ok := contentLength(&resp.Header); ok {
		size = n
	}
	if resp.Status == 204 || resp.Status == 304 {
		size = 0
	}
	st.fill = newFill(m, size, c.maxObject)
	st.fill.key = st.key
	st.status.stored = true
	st.status.ttl, st.status.hasTTL = m.fr.lifetime-m.fr.initialAge, true
	if st.flight != nil {
		// Waiters on a flight for the primary key read the fill only when
		// the response is for their variant (fromFill).
		c.locks.publish(st.flight, filling, st.fill)
	}
}

// staleOnError returns a stale response to answer with instead of an
// error (a 5xx, or no answer at all) where stale-if-error allows it: the
// response's own directive (RFC 5861), else the route's window; never when
// the response must be revalidated (§4.2.4).
func (c *Cache) staleOnError(st *request, status int, now time.Time) *proxy.Response {
	if st.stale == nil {
		return nil
	}
	fr := c.freshnessOf(st.stale.Meta)
	if !c.ifError(&fr, now) {
		return nil
	}
	st.release(erred)
	c.counts.stale.Add(1)
	st.status = cacheStatus{fwd: fwdStale, fwdStatus: status, detail: "stale-if-error"}
	st.statusSent = true
	obj := st.stale
	st.stale = nil
	return c.respond(st.s, obj, &fr, now, &st.status)
}

// ifError reports whether a response of freshness fr may answer at now
// when the upstream fails.
func (c *Cache) ifError(fr *freshness, now time.Time) bool {
	if fr.mustRevalidate || fr.noCache {
		return false
	}
	window := c.sie
	if fr.staleIfError >= 0 {
		window = fr.staleIfError
	}
	return fr.staleBy(now) <= window && window > 0
}

// whileRevalidate reports whether a stale response of freshness fr may
// answer at now while a background request revalidates it.
func (c *Cache) whileRevalidate(fr *freshness, now time.Time) bool {
	if fr.mustRevalidate || fr.noCache {
		return false
	}
	window := c.swr
	if fr.staleWhileRevalidate >= 0 {
		window = fr.staleWhileRevalidate
	}
	return window > 0 && fr.staleBy(now) <= window
}

// revalidateInBackground spawns a request that revalidates the stale
// response under key, unless one holds the key's flight already.
func (c *Cache) revalidateInBackground(s *proxy.Session, primary, key string, obj *Object) {
	f, writer := c.locks.acquire(key)
	if !writer {
		return
	}
	// The spawned request has its own handle on the stale response: the
	// answer now takes this one.
	stale, err := c.store.Get(key)
	if err != nil || stale == nil || stale.Meta.Marker {
		if stale != nil {
			stale.Close()
		}
		c.locks.finish(f)
		return
	}
	var get h1.Request
	get.CopyFrom(&s.Request)
	ok := s.Spawn(&get, func(sub *proxy.Session) {
		// Its state is ready before any phase runs, and its tee hears of
		// its end whatever answers it (a phase before the cache, say):
		// the flight never outlives it.
		st := &request{c: c, s: sub, reqTime: time.Now(), background: true, primary: primary,
			flight: f, stale: stale, staleKey: key, store: true}
		st.revalidate = hasValidators(stale.Meta)
		st.status.fwd = fwdStale
		sub.SetValue(stateKey{}, st)
		sub.Tee(st, true)
		sub.Note("cache", "background")
	})
	if !ok {
		stale.Close()
		c.locks.finish(f)
		return
	}
	c.counts.background.Add(1)
}

// FailToProxy answers a request whose tries all failed with a stale
// response, where stale-if-error allows it.
func (c *Cache) FailToProxy(s *proxy.Session, e *fault.Error) *proxy.Response {
	st := state(s)
	if st == nil || st.stale == nil || st.background || e.Source == fault.Downstream {
		return nil
	}
	return c.staleOnError(st, 0, time.Now())
}

// AnswerFilter puts Cache-Status on sluice's own answers to the requests
// the cache saw (a 502, a 504 to only-if-cached...).
func (c *Cache) AnswerFilter(s *proxy.Session, resp *h1.Response) {
	st := state(s)
	if st == nil || st.statusSent {
		return
	}
	c.addStatus(st, resp)
}

// addStatus adds the cache's Cache-Status member to resp, after the
// upstream's.
func (c *Cache) addStatus(st *request, resp *h1.Response) {
	if st.statusSent {
		return
	}
	st.statusSent = true
	var b [64]byte
	resp.Header.AddBytes([]byte("Cache-Status"), st.status.appendTo(b[:0], c.token))
	if !st.status.hit && st.status.fwd != fwdMethod && st.status.fwd != fwdRequest {
		st.s.Note("cache", st.status.note())
	}
}

// URL returns the request's URL (appendURL), made at its first use.
func (st *request) URL() string {
	if st.url == "" {
		st.url = string(appendURL(nil, st.s))
	}
	return st.url
}

// release tells the waiters on the flight this request writes what became
// of it (unless the flight is filling: finish ends that).
func (st *request) release(o outcome) {
	if st.flight != nil {
		st.c.locks.publish(st.flight, o, nil)
	}
}

// closeStale lets go of the stale response held.
func (st *request) closeStale() {
	if st.stale != nil {
		st.stale.Close()
		st.stale = nil
	}
}

// Head is the tee's: the head was taken in UpstreamResponseFilter.
func (st *request) Head(*h1.Response) {}

// Body gathers the next piece of the response being stored.
func (st *request) Body(p []byte) {
	if st.fill != nil && !st.fill.write(p) {
		// Past max_object: not stored; the waiters reading it are cut.
		st.fill = nil
		st.status.stored = false
		if st.flight != nil {
			st.c.locks.finish(st.flight)
		}
	}
}

// End stores the response, which came whole.
func (st *request) End(trailers *h1.Header) {
	c := st.c
	if fl := st.fill; fl != nil {
		body := fl.end(trailers)
		m := fl.meta
		if trailers != nil {
			m.Trailer.CopyFrom(trailers)
		}
		m.Size = int64(len(body))
		c.put(st, m, body)
	}
	st.finish()
}

// Abort drops the response being stored: it did not come whole.
func (st *request) Abort() {
	if st.fill != nil {
		st.fill.fail()
	}
	st.finish()
}

// finish ends the request's part in the cache: its flight leaves the
// table (a waiter takes over one that found no answer), and a stale
// response it held is let go.
func (st *request) finish() {
	if st.flight != nil {
		st.c.locks.finish(st.flight)
	}
	st.closeStale()
}

// put stores a response that came whole under st.key, with a Vary marker
// under the primary key when it varies.
func (c *Cache) put(st *request, m *Meta, body []byte) {
	if len(m.Vary) > 0 {
		marker := &Meta{URL: m.URL, Marker: true, Vary: m.Vary, RequestTime: m.RequestTime, ResponseTime: m.ResponseTime}
		if old, _ := c.store.Get(st.primary); old == nil || !old.Meta.Marker || !sameVary(old.Meta.Vary, m.Vary) {
			if err := c.store.Put(st.primary, &Object{Meta: marker}); err != nil {
				c.log.Error("cache: store failed", "cache", c.name, "url", st.URL(), "error", err)
				return
			}
		} else {
			old.Close()
		}
	}
	if err := c.store.Put(st.key, &Object{Meta: m, Body: Body{Size: int64(len(body)), Bytes: body}}); err != nil {
		c.log.Error("cache: store failed", "cache", c.name, "url", st.URL(), "error", err)
		return
	}
	c.counts.stored.Add(1)
	c.locks.memory.forget(st.key)
}

// invalidate removes what is stored for the URL of an unsafe request that
// succeeded, and for the Location and Content-Location of its answer when
// they are of the same origin (§4.4).
func (c *Cache) invalidate(s *proxy.Session, resp *h1.Response) {
	target := string(appendURL(nil, s))
	p := Purge{URLs: []string{target}}
	base, err := url.Parse(target)
	if err == nil {
		for _, name := range [...]string{"Location", "Content-Location"} {
			v := resp.Header.Get(name)
			if v == nil {
				continue
			}
			u, err := base.Parse(string(v))
			if err != nil || u.Scheme != base.Scheme || u.Host != base.Host {
				continue
			}
			p.URLs = append(p.URLs, u.Scheme+"://"+u.Host+u.RequestURI())
		}
	}
	n, err := c.store.Purge(p)
	if err != nil {
		c.log.Error("cache: invalidation failed", "cache", c.name, "url", target, "error", err)
	}
	if n > 0 {
		c.counts.invalidations.Add(uint64(n))
	}
}

// allowsAuthorizationMeta reports whether a stored response may answer a
// request with Authorization (§3.5).
func (c *Cache) allowsAuthorizationMeta(m *Meta) bool {
	var v respView
	v.parse(&m.Header, c.token)
	return allowsAuthorization(&v)
}

// hasValidators reports whether a stored response can be validated.
func hasValidators(m *Meta) bool {
	return m.Header.Has("ETag") || m.Header.Has("Last-Modified")
}

// conditional reports whether a request carries a precondition a cache
// may evaluate (If-None-Match, If-Modified-Since).
func conditional(h *h1.Header) bool {
	return h.Has("If-None-Match") || h.Has("If-Modified-Since")
}

// safeMethod reports whether a method is safe (RFC 9110 §9.2.1): its
// success invalidates nothing.
func safeMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return false
}

// serverError reports whether a status is one stale-if-error stands in
// for (RFC 5861 §4).
func serverError(status int) bool {
	return status == 500 || status == 502 || status == 503 || status == 504
}

// stripInternal removes the fields meant for this cache from an answer.
func stripInternal(h *h1.Header) {
	for _, f := range internalFields {
		if h.Has(f) {
			h.Del(f)
		}
	}
}
