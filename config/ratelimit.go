package config

import (
	"github.com/sluice-proxy/sluice/idempotency"
	"github.com/sluice-proxy/sluice/ratelimit"
	"go.yaml.in/yaml/v3"
)

// This file holds the parsing of the rate_limit section of a route and of
// the top-level redis section that a rate limit's or an idempotency
// section's store: redis uses.

// redis walks the top-level redis section.
func (d *decoder) redis(n *yaml.Node, path string) *Redis {
	r := &Redis{Timeout: idempotency.DefaultTimeout, Line: n.Line}
	present := d.mapping(n, path, []field{
		{"address", func(n *yaml.Node, path string) { d.address(&r.Address, n, path, false) }},
		{"password", d.str(&r.Password, nil)},
		{"db", d.integer(&r.DB, between(0, 15))},
		{"timeout", d.duration(&r.Timeout, true)},
	})
	d.required(n, path, present, "address")
	return r
}

// routeRateLimit walks the rate_limit section of a route.
func (d *decoder) routeRateLimit(n *yaml.Node, path string) *RateLimit {
	rl := &RateLimit{Burst: 1, Key: "client_ip", Store: "local", OnStoreError: "allow",
		StoreTimeout: ratelimit.DefaultTimeout, Line: n.Line}
	present := d.mapping(n, path, []field{
		{"rate", func(n *yaml.Node, path string) {
			var s string
			if !d.scalarString(&s, n, path) {
				return
			}
			r, err := ratelimit.ParseRate(s)
			if err != nil {
				d.addf(n, path, "%v", err)
				return
			}
			rl.Rate = r
		}},
		{"burst", d.integer(&rl.Burst, between(1, ratelimit.MaxBurst))},
		{"key", d.str(&rl.Key, checkRateLimitKey)},
		{"store", func(n *yaml.Node, path string) {
			rl.storeLine, rl.storeColumn = n.Line, n.Column
			d.enum(&rl.Store, "local", "redis")(n, path)
		}},
		{"on_store_error", d.enum(&rl.OnStoreError, "allow", "deny")},
		{"store_timeout", d.duration(&rl.StoreTimeout, true)},
	})
	d.required(n, path, present, "rate")
	return rl
}

// checkRateLimitKey validates a rate_limit key kind.
func checkRateLimitKey(s string) (string, string) {
	if _, ok := ratelimit.ParseKey(s); !ok {
		return "", `must be client_ip, route, or header:NAME with NAME a header field name`
	}
	return s, ""
}

// checkRedisUsers reports each rate limit with store: redis in a file
// without a redis section.
func (d *decoder) checkRedisUsers(c *Config) {
	if c.Redis != nil {
		return
	}
	for i, r := range c.Routes {
		if rl := r.RateLimit; rl != nil && rl.Store == "redis" {
			d.addf(&yaml.Node{Line: rl.storeLine, Column: rl.storeColumn}, join(index("routes", i), "rate_limit.store"),
				"is redis, but there is no top-level redis section saying which server (redis: {address: host:port})")
		}
	}
}
