package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-proxy/sluice/idempotency"
	"github.com/sluice-proxy/sluice/ratelimit"
)

// This file holds the parsing of a route's idempotency section and the
// building of its layer (package idempotency).

// Idempotency gives a route's keyed requests the Idempotency-Key
// semantics (see package idempotency): the first request with a key is
// forwarded and its answer kept; a retry gets that answer again without
// reaching the upstream, 409 while the first runs, 422 with another
// payload. The section given, even empty ("idempotency: {}"), turns it
// on with the defaults.
type Idempotency struct {
	// Header (key "header", default "Idempotency-Key") is the key's
	// field, a field name.
	Header string
	// Methods (key "methods", default [POST, PATCH], at least one) are
	// the methods whose keyed requests are handled; tokens, held in
	// upper case. A request of another method passes untouched.
	Methods []string
	// Required (key "required", default false) answers 400 to a request
	// of Methods without the key.
	Required bool
	// Scope (key "scope", default [route, client_ip]) is what a key
	// belongs to besides itself: "route" (the route's host and path
	// prefix), "client_ip" (the client's address; an IPv6 one's /64),
	// "header:NAME" (the field's values, kept only as digests; e.g.
	// header:Authorization). [] shares every key among all clients.
	Scope []string
	// TTL (key "ttl", default 24h, >= lease) is how long an ended
	// request's answer (or outcome) is kept and replayed.
	TTL time.Duration
	// Lease (key "lease", default 30s, >= 1s) is how long a claim lives
	// without its holder renewing it (every third of it): the longest a
	// key stays in flight after its sluice died.
	Lease time.Duration
	// MaxResponse (key "max_response", default 1MiB, 0..64MiB) bounds
	// the answers kept (fields, body and trailers); a larger one is not
	// kept, and retries get 409.
	MaxResponse int64
	// MaxRequest (key "max_request", default 1MiB, 0..64MiB) bounds the
	// body of a keyed request, read whole for its digest before it goes
	// upstream; a larger one is answered 413.
	MaxRequest int64
	// ReleaseStatuses (key "release_statuses", default [408, 425, 429,
	// 5xx]) are the statuses whose answers are not kept and free the key
	// instead, so that a retry goes through: statuses (100..599) or
	// classes (1xx..5xx). [] keeps every answer.
	ReleaseStatuses []string
	// Store (key "store", default "local") keeps the records: "local",
	// this sluice's memory, carried over by a reload when the route
	// keeps its host and path prefix; "redis", the top-level redis
	// section's server, shared by every sluice using it.
	Store string
	// OnStoreError (key "on_store_error", default "deny") is what
	// becomes of a keyed request when the store fails (Redis down, or
	// slower than redis.timeout; a full local store): "deny" answers 503,
	// "allow" forwards it without the layer. Either way it is counted.
	OnStoreError string
	// UnknownOutcome (key "unknown_outcome", default "refuse") is what
	// becomes of the retry of a request that may have been processed and
	// got no answer: "refuse" answers 502 saying so; "forward" forwards
	// it again under a new claim.
	UnknownOutcome string
	// MaxKeys (key "max_keys", default 100000, 64..100000000, store
	// local only) bounds the records the local store holds; a new key
	// beyond it, when none has expired, is a store error.
	MaxKeys int
	// MaxBytes (key "max_bytes", default 64MiB, 1MiB..1TiB, store local
	// only) bounds the bytes of the answers the local store keeps; an
	// answer beyond it is not kept.
	MaxBytes int64
	// Line is the line of the section in the file, for messages.
	Line int

	storeLine, storeColumn int // of the store value, for the check that redis is set
}

// routeIdempotency walks the idempotency section of a route.
func (d *decoder) routeIdempotency(n *yaml.Node, path string) *Idempotency {
	id := &Idempotency{
		Header:          idempotency.DefaultHeader,
		Methods:         slices.Clone(idempotency.DefaultMethods),
		Scope:           []string{"route", "client_ip"},
		TTL:             idempotency.DefaultTTL,
		Lease:           idempotency.DefaultLease,
		MaxResponse:     idempotency.DefaultMaxResponse,
		MaxRequest:      idempotency.DefaultMaxRequest,
		ReleaseStatuses: []string{"408", "425", "429", "5xx"},
		Store:           "local",
		OnStoreError:    "deny",
		UnknownOutcome:  "refuse",
		MaxKeys:         idempotency.DefaultMaxKeys,
		MaxBytes:        idempotency.DefaultMaxBytes,
		Line:            n.Line,
	}
	var ttlNode, leaseNode *yaml.Node
	var localOnly []located
	present := d.mapping(n, path, []field{
		{"header", d.str(&id.Header, checkFieldName)},
		{"methods", func(n *yaml.Node, path string) { id.Methods = d.methods(n, path) }},
		{"required", d.boolean(&id.Required)},
		{"scope", func(n *yaml.Node, path string) { id.Scope = d.idempotencyScope(n, path) }},
		{"ttl", func(n *yaml.Node, path string) {
			ttlNode = n
			d.duration(&id.TTL, true)(n, path)
		}},
		{"lease", func(n *yaml.Node, path string) {
			leaseNode = n
			if d.duration(&id.Lease, true)(n, path); id.Lease < time.Second {
				d.addf(n, path, "must be at least 1s (it is renewed every third of it)")
				id.Lease = time.Second
			}
		}},
		{"max_response", d.size(&id.MaxResponse, 0, 64<<20)},
		{"max_request", d.size(&id.MaxRequest, 0, 64<<20)},
		{"release_statuses", func(n *yaml.Node, path string) { id.ReleaseStatuses = d.releaseStatuses(n, path) }},
		{"store", func(n *yaml.Node, path string) {
			id.storeLine, id.storeColumn = n.Line, n.Column
			d.enum(&id.Store, "local", "redis")(n, path)
		}},
		{"on_store_error", d.enum(&id.OnStoreError, "deny", "allow")},
		{"unknown_outcome", d.enum(&id.UnknownOutcome, "refuse", "forward")},
		{"max_keys", func(n *yaml.Node, path string) {
			localOnly = append(localOnly, located{n, path})
			d.integer(&id.MaxKeys, between(64, 100_000_000))(n, path)
		}},
		{"max_bytes", func(n *yaml.Node, path string) {
			localOnly = append(localOnly, located{n, path})
			d.size(&id.MaxBytes, 1<<20, 1<<40)(n, path)
		}},
	})
	if present["ttl"] || present["lease"] {
		if id.TTL < id.Lease {
			at, p := ttlNode, join(path, "ttl")
			if at == nil {
				at, p = leaseNode, join(path, "lease")
			}
			d.addf(at, p, "ttl (%s) is shorter than the lease (%s): an answer must be kept at least as long as a claim lives", id.TTL, id.Lease)
		}
	}
	if id.Store == "redis" {
		for _, l := range localOnly {
			d.addf(l.n, l.path, "bounds the local store; this route's store is redis")
		}
	}
	return id
}

// methods walks a list of methods: tokens, held in upper case, at least
// one, each once.
func (d *decoder) methods(n *yaml.Node, path string) []string {
	ms := []string{}
	seen := map[string]int{}
	count := d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
		var m string
		if d.str(&m, checkToken)(n, path); m == "" {
			return
		}
		if first, dup := seen[m]; dup {
			d.addf(n, path, "%s is listed twice (first at line %d)", m, first)
			return
		}
		seen[m] = n.Line
		ms = append(ms, m)
	})
	if count == 0 && isList(n) {
		d.addf(n, path, "at least one method is required, such as [POST]")
	}
	return ms
}

// idempotencyScope walks the scope list of an idempotency section.
func (d *decoder) idempotencyScope(n *yaml.Node, path string) []string {
	scope := []string{}
	seen := map[string]int{}
	d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		sc, err := idempotency.ParseScope(s)
		if err != nil {
			d.addf(n, path, "%q: %v", s, err)
			return
		}
		key := strings.ToLower(sc.String())
		if first, dup := seen[key]; dup {
			d.addf(n, path, "%s is listed twice (first at line %d)", s, first)
			return
		}
		seen[key] = n.Line
		scope = append(scope, s)
	})
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		return nil // reported by sequence
	}
	return scope
}

// releaseStatuses walks the release_statuses list.
func (d *decoder) releaseStatuses(n *yaml.Node, path string) []string {
	list := []string{}
	d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		if _, err := idempotency.ParseStatuses([]string{s}); err != nil {
			d.addf(n, path, "%v", err)
			return
		}
		list = append(list, s)
	})
	return list
}

// checkIdempotency reports, for each route with an idempotency section,
// store: redis in a file without a redis section, and static files
// (which nothing forwards).
func (d *decoder) checkIdempotency(c *Config) {
	for i, r := range c.Routes {
		id := r.Idempotency
		if id == nil {
			continue
		}
		if r.Static != nil {
			d.addf(&yaml.Node{Line: id.Line}, join(index("routes", i), "idempotency"),
				"is for a route with an upstream; a static route's files are answered by sluice and never processed twice")
		}
		if id.Store == "redis" && c.Redis == nil {
			d.addf(&yaml.Node{Line: id.storeLine, Column: id.storeColumn}, join(index("routes", i), "idempotency.store"),
				"is redis, but there is no top-level redis section saying which server (redis: {address: host:port})")
		}
	}
}

// idempotencyLayer builds the idempotency layer of route r, and g's
// Redis client for the layers when it is the first route to need it.
func (g *Generation) idempotencyLayer(cfg *Config, r Route) (*idempotency.Layer, error) {
	id := r.Idempotency
	name := routeName(r)
	o := idempotency.Options{
		Name:        name,
		Header:      id.Header,
		Methods:     id.Methods,
		Required:    id.Required,
		Scope:       []idempotency.Scope{},
		TTL:         id.TTL,
		Lease:       id.Lease,
		MaxResponse: id.MaxResponse,
		MaxRequest:  id.MaxRequest,
	}
	if o.MaxResponse == 0 {
		o.MaxResponse = -1 // max_response: 0 keeps no body
	}
	if o.MaxRequest == 0 {
		o.MaxRequest = 1 // max_request: 0 takes no body
	}
	for _, s := range id.Scope {
		sc, err := idempotency.ParseScope(s)
		if err != nil {
			return nil, fmt.Errorf("idempotency.scope: %w", err) // validated by Parse
		}
		o.Scope = append(o.Scope, sc)
	}
	release, err := idempotency.ParseStatuses(id.ReleaseStatuses)
	if err != nil {
		return nil, fmt.Errorf("idempotency.release_statuses: %w", err)
	}
	o.Release = release
	if id.OnStoreError == "allow" {
		o.OnStoreError = idempotency.Allow
	}
	if id.UnknownOutcome == "forward" {
		o.UnknownOutcome = idempotency.Forward
	}
	if id.Store == "redis" {
		if g.idemRedis == nil {
			g.idemRedis = ratelimit.NewRedisClient(cfg.Redis.Address, cfg.Redis.Password, cfg.Redis.DB, cfg.Redis.Timeout)
		}
		o.Store = &idempotency.Redis{Client: g.idemRedis, Timeout: cfg.Redis.Timeout}
	} else {
		o.Store = idempotency.NewLocal(id.MaxKeys, id.MaxBytes)
	}
	l, err := idempotency.New(o)
	if err != nil {
		return nil, err
	}
	if g.layers == nil {
		g.layers = make(map[string]*idempotency.Layer)
	}
	if _, dup := g.layers[name]; !dup { // a later route of the same name is never matched
		g.layers[name] = l
	}
	return l, nil
}

// Idempotency reports each route's idempotency layer's counts, for
// metrics: the route's name (its host and path prefix) and its counts.
func (g *Generation) Idempotency(report func(route string, c idempotency.Counts)) {
	for name, l := range g.layers {
		report(name, l.Counts())
	}
}

// closeIdempotency closes g's idempotency layers, and their Redis client
// once their last claim has ended: requests of g still in flight keep
// and release their keys through it. With no claim live, the client is
// closed at once; else a goroutine waits for them.
func (g *Generation) closeIdempotency() {
	var pending []<-chan struct{}
	for _, l := range g.layers {
		done := l.Close()
		select {
		case <-done:
		default:
			pending = append(pending, done)
		}
	}
	c := g.idemRedis
	if c == nil {
		return
	}
	if len(pending) == 0 {
		c.Close()
		return
	}
	go func() {
		for _, done := range pending {
			<-done
		}
		c.Close()
	}()
}
