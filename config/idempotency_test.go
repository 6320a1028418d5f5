package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// withIdempotency is a config whose one route has the idempotency given
// (a flow mapping), and whose extra top-level lines are top.
func withIdempotency(id, top string) string {
	return "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - upstream: web\n    idempotency: " + id +
		"\nupstreams:\n  web:\n    servers: [{address: \"127.0.0.1:9001\"}]\n" + top
}

func TestParseIdempotency(t *testing.T) {
	c, err := Parse("t.yaml", []byte(withIdempotency(`{}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	want := Idempotency{Header: "Idempotency-Key", Methods: []string{"POST", "PATCH"}, Scope: []string{"route", "client_ip"},
		TTL: 24 * time.Hour, Lease: 30 * time.Second, MaxResponse: 1 << 20, MaxRequest: 1 << 20, ReleaseStatuses: []string{"408", "425", "429", "5xx"},
		Store: "local", OnStoreError: "deny", UnknownOutcome: "refuse", MaxKeys: 100000, MaxBytes: 64 << 20, Line: 4}
	if id := c.Routes[0].Idempotency; id == nil || !reflect.DeepEqual(*id, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", id, want)
	}
	c, err = Parse("t.yaml", []byte(withIdempotency(
		`{header: X-Request-Key, methods: [post, PUT, DELETE], required: true, scope: ["header:Authorization", route],
      ttl: 1h, lease: 10s, max_response: 64KiB, max_request: 8KiB, release_statuses: [5xx, 409], store: redis, on_store_error: allow,
      unknown_outcome: forward}`,
		"redis: {address: \"redis.internal:6379\", timeout: 20ms}\n")))
	if err != nil {
		t.Fatal(err)
	}
	id := c.Routes[0].Idempotency
	want = Idempotency{Header: "X-Request-Key", Methods: []string{"POST", "PUT", "DELETE"}, Required: true,
		Scope: []string{"header:Authorization", "route"}, TTL: time.Hour, Lease: 10 * time.Second, MaxResponse: 64 << 10, MaxRequest: 8 << 10,
		ReleaseStatuses: []string{"5xx", "409"}, Store: "redis", OnStoreError: "allow", UnknownOutcome: "forward",
		MaxKeys: 100000, MaxBytes: 64 << 20, Line: 4, storeLine: id.storeLine, storeColumn: id.storeColumn}
	if !reflect.DeepEqual(*id, want) {
		t.Errorf("every value:\n got %+v\nwant %+v", *id, want)
	}
	if c.Redis.Timeout != 20*time.Millisecond {
		t.Errorf("redis.timeout %v, want 20ms", c.Redis.Timeout)
	}
	c, err = Parse("t.yaml", []byte(withIdempotency(`{scope: [], release_statuses: [], max_keys: 1000, max_bytes: 1GiB}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	if id := c.Routes[0].Idempotency; len(id.Scope) != 0 || id.Scope == nil || len(id.ReleaseStatuses) != 0 ||
		id.MaxKeys != 1000 || id.MaxBytes != 1<<30 {
		t.Errorf("empty lists and local bounds: %+v", id)
	}
}

func TestParseIdempotencyProblem(t *testing.T) {
	tests := []struct {
		name      string
		id, top   string
		line, col int
		path, msg string
	}{
		{"unknown scope kind", `{scope: [route, user]}`, "", 4, 34, "routes[0].idempotency.scope[1]", "unknown scope"},
		{"header scope without a name", `{scope: ["header:"]}`, "", 4, 27, "routes[0].idempotency.scope[0]", "header:NAME"},
		{"scope twice", `{scope: [route, route]}`, "", 4, 34, "routes[0].idempotency.scope[1]", "listed twice"},
		{"header scope twice, in two cases", `{scope: ["header:A", "header:a"]}`, "", 4, 39, "routes[0].idempotency.scope[1]", "listed twice"},
		{"scope not a list", `{scope: route}`, "", 4, 26, "routes[0].idempotency.scope", "must be a list"},
		{"ttl shorter than the lease", `{ttl: 10s, lease: 20s}`, "", 4, 24, "routes[0].idempotency.ttl", "shorter than the lease"},
		{"lease longer than the default ttl", `{lease: 25h}`, "", 4, 26, "routes[0].idempotency.lease", "shorter than the lease"},
		{"lease below a second", `{lease: 500ms}`, "", 4, 26, "routes[0].idempotency.lease", "at least 1s"},
		{"ttl of zero", `{ttl: 0}`, "", 4, 24, "routes[0].idempotency.ttl", "must be > 0"},
		{"redis without a section", `{store: redis}`, "", 4, 26, "routes[0].idempotency.store", "no top-level redis section"},
		{"unknown store", `{store: disk}`, "", 4, 26, "routes[0].idempotency.store", "want one of local, redis"},
		{"unknown action", `{on_store_error: retry}`, "", 4, 35, "routes[0].idempotency.on_store_error", "want one of deny, allow"},
		{"unknown outcome action", `{unknown_outcome: guess}`, "", 4, 36, "routes[0].idempotency.unknown_outcome", "want one of refuse, forward"},
		{"bad header", `{header: "Idempotency Key"}`, "", 4, 27, "routes[0].idempotency.header", "field name"},
		{"no methods", `{methods: []}`, "", 4, 28, "routes[0].idempotency.methods", "at least one method"},
		{"a method twice", `{methods: [POST, post]}`, "", 4, 35, "routes[0].idempotency.methods[1]", "listed twice"},
		{"a method that is no token", `{methods: ["PO ST"]}`, "", 4, 29, "routes[0].idempotency.methods[0]", "HTTP method"},
		{"max_response too large", `{max_response: 65MiB}`, "", 4, 33, "routes[0].idempotency.max_response", "between 0B and 64MiB"},
		{"a status out of range", `{release_statuses: [600]}`, "", 4, 38, "routes[0].idempotency.release_statuses[0]", "status 100..599"},
		{"a class out of range", `{release_statuses: [6xx]}`, "", 4, 38, "routes[0].idempotency.release_statuses[0]", "class 1xx..5xx"},
		{"max_keys with redis", `{store: redis, max_keys: 1000}`, "redis: {address: \"127.0.0.1:6379\"}\n", 4, 43, "routes[0].idempotency.max_keys", "local store"},
		{"max_keys too small", `{max_keys: 10}`, "", 4, 29, "routes[0].idempotency.max_keys", "between 64 and 100000000"},
		{"unknown key", `{tll: 1h}`, "", 4, 19, "routes[0].idempotency.tll", `did you mean "ttl"?`},
		{"redis timeout of zero", `{store: redis}`, "redis: {address: \"127.0.0.1:6379\", timeout: 0}\n", 8, 45, "redis.timeout", "must be > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(withIdempotency(tt.id, tt.top)))
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
	// A static route's files are never forwarded.
	_, err := Parse("t.yaml", []byte("listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - static: {root: .}\n    idempotency: {}\n"+
		"  - upstream: web\nupstreams:\n  web:\n    servers: [{address: \"127.0.0.1:9001\"}]\n"))
	if err == nil || !strings.Contains(err.Error(), "t.yaml:4:") || !strings.Contains(err.Error(), "is for a route with an upstream") {
		t.Errorf("idempotency on a static route: %v", err)
	}
}
