package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/ratelimit"
)

// withRateLimit is a config whose one route has the rate_limit given (a
// flow mapping), and whose extra top-level lines are top.
func withRateLimit(rl, top string) string {
	return "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - upstream: web\n    rate_limit: " + rl +
		"\nupstreams:\n  web:\n    servers: [{address: \"127.0.0.1:9001\"}]\n" + top
}

func TestParseRateLimit(t *testing.T) {
	c, err := Parse("t.yaml", []byte(withRateLimit(`{rate: 6000/m}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	want := RateLimit{Rate: ratelimit.Rate{Count: 6000, Period: time.Minute}, Burst: 1, Key: "client_ip", Store: "local",
		OnStoreError: "allow", StoreTimeout: 50 * time.Millisecond, Line: 4}
	if rl := c.Routes[0].RateLimit; rl == nil || *rl != want {
		t.Errorf("defaults: got %+v, want %+v", rl, want)
	}
	c, err = Parse("t.yaml", []byte(withRateLimit(
		`{rate: 10/h, burst: 5, key: "header:X-Api-Key", store: redis, on_store_error: deny, store_timeout: 20ms}`,
		"redis: {address: \"redis.internal:6379\", password: pw, db: 2}\n")))
	if err != nil {
		t.Fatal(err)
	}
	rl := c.Routes[0].RateLimit
	if rl.Rate != (ratelimit.Rate{Count: 10, Period: time.Hour}) || rl.Burst != 5 || rl.Key != "header:X-Api-Key" ||
		rl.Store != "redis" || rl.OnStoreError != "deny" || rl.StoreTimeout != 20*time.Millisecond {
		t.Errorf("every value: got %+v", rl)
	}
	if r := c.Redis; r == nil || *r != (Redis{Address: "redis.internal:6379", Password: "pw", DB: 2, Timeout: 50 * time.Millisecond, Line: 8}) {
		t.Errorf("redis: got %+v", r)
	}
}

func TestParseRateLimitProblem(t *testing.T) {
	tests := []struct {
		name      string
		rl, top   string
		line, col int
		path, msg string
	}{
		{"no rate", `{burst: 5}`, "", 4, 17, "routes[0].rate_limit.rate", "missing; it is required"},
		{"rate without unit", `{rate: 100}`, "", 4, 24, "routes[0].rate_limit.rate", "a rate is a whole number of requests per s, m or h"},
		{"rate per day", `{rate: 100/d}`, "", 4, 24, "routes[0].rate_limit.rate", "per s, m or h"},
		{"rate of zero", `{rate: 0/s}`, "", 4, 24, "routes[0].rate_limit.rate", "at least 1"},
		{"rate too high", `{rate: 2000000/s}`, "", 4, 24, "routes[0].rate_limit.rate", "more than 1000000 requests a second"},
		{"burst 0", `{rate: 1/s, burst: 0}`, "", 4, 36, "routes[0].rate_limit.burst", "must be between 1 and 1000000"},
		{"burst a word", `{rate: 1/s, burst: many}`, "", 4, 36, "routes[0].rate_limit.burst", "whole number"},
		{"unknown key kind", `{rate: 1/s, key: user}`, "", 4, 34, "routes[0].rate_limit.key", "must be client_ip, route, or header:NAME"},
		{"header without a name", `{rate: 1/s, key: "header:"}`, "", 4, 34, "routes[0].rate_limit.key", "header:NAME"},
		{"unknown store", `{rate: 1/s, store: memcached}`, "", 4, 36, "routes[0].rate_limit.store", "want one of local, redis"},
		{"redis without a section", `{rate: 1/s, store: redis}`, "", 4, 36, "routes[0].rate_limit.store", "no top-level redis section"},
		{"unknown action", `{rate: 1/s, on_store_error: retry}`, "", 4, 45, "routes[0].rate_limit.on_store_error", "want one of allow, deny"},
		{"timeout of zero", `{rate: 1/s, store_timeout: 0}`, "", 4, 44, "routes[0].rate_limit.store_timeout", "must be > 0"},
		{"unknown rate limit key", `{rate: 1/s, brust: 3}`, "", 4, 29, "routes[0].rate_limit.brust", `did you mean "burst"?`},
		{"redis without address", `{rate: 1/s, store: redis}`, "redis: {db: 1}\n", 8, 8, "redis.address", "missing"},
		{"redis address without port", `{rate: 1/s}`, "redis: {address: localhost}\n", 8, 18, "redis.address", "not a host:port"},
		{"redis db 16", `{rate: 1/s}`, "redis: {address: \"127.0.0.1:6379\", db: 16}\n", 8, 40, "redis.db", "between 0 and 15"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(withRateLimit(tt.rl, tt.top)))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse: got error %v (%T), want an *Error", err, err)
			}
			if len(e.Problems) != 1 {
				t.Fatalf("got %d problems, want 1:\n%v", len(e.Problems), err)
			}
			p := e.Problems[0]
			if p.Line != tt.line || p.Column != tt.col || p.Path != tt.path || !strings.Contains(p.Msg, tt.msg) {
				t.Errorf("got  %#v\nwant line %d, column %d, path %q, message containing %q", p, tt.line, tt.col, tt.path, tt.msg)
			}
		})
	}
}
