package config

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-proxy/sluice/balance"
)

// minimal is the smallest valid config.
const minimal = `listen:
  - address: 127.0.0.1:8080
routes:
  - upstream: web
upstreams:
  web:
    servers:
      - address: 127.0.0.1:9001
`

func TestParseMinimalGetsDefaults(t *testing.T) {
	got, err := Parse("min.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		File:   "min.yaml",
		Listen: []Listener{{Address: "127.0.0.1:8080", Line: 2}},
		Timeouts: Timeouts{
			Header: 10 * time.Second,
			Idle:   60 * time.Second,
			Drain:  30 * time.Second,
			Body:   60 * time.Second,
			Send:   60 * time.Second,

			StreamIdle: 5 * time.Minute,
		},
		Limits: Limits{
			MaxHeaderBytes:       64 << 10,
			MaxHeaders:           100,
			MaxIdleUpstreamConns: 1024,
			H2:                   H2Limits{MaxConcurrentStreams: 250, InitialWindow: 1 << 20, MaxHeaderList: 64 << 10},
			H3: H3Limits{MaxConcurrentStreams: 100, MaxHeaderList: 64 << 10, IdleTimeout: 30 * time.Second,
				RetryAbove: 1000, RapidResetPercent: 50},
		},
		AccessLog: AccessLog{Enabled: true, Format: "text", Path: "", Buffer: 64 << 10, Flush: time.Second},
		Log:       Log{Level: "info", Format: "text"},
		Forwarded: Forwarded{XForwardedFor: true, XForwardedProto: true, XForwardedHost: true, Via: true, RequestID: true, ClientIP: "peer"},
		Metrics:   Metrics{Address: ""},
		Routes:    []Route{{Upstream: "web", Line: 4}},
		Upstreams: []*Upstream{{
			Name:     "web",
			Line:     6,
			Servers:  []Server{{Address: "127.0.0.1:9001", Weight: 1, Line: 8, Resolve: 10 * time.Second}},
			Protocol: "http/1.1",
			Balance:  "p2c",
			HashKey:  "client_ip",
			Health:   DefaultHealth(),
			Timeouts: UpstreamTimeouts{
				Connect:        2 * time.Second,
				ResponseHeader: 60 * time.Second,
				Read:           60 * time.Second,
				Write:          60 * time.Second,
			},
			Pool: Pool{
				MaxIdle:              32,
				IdleTimeout:          60 * time.Second,
				MaxRequests:          0,
				MaxAge:               0,
				NonIdempotent:        "learn",
				NonIdempotentMaxIdle: time.Second,
			},
			Retry: Retry{
				Tries:             3,
				On:                []string{"error", "timeout"},
				NonIdempotent:     "keyed",
				IdempotencyHeader: "Idempotency-Key",
				Timeout:           60 * time.Second,
				Backoff:           Backoff{Base: 0, Max: time.Second},
				Budget:            Budget{Ratio: 0.2, MinPerSecond: 10},
				BodyBuffer:        64 << 10,
			},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(minimal):\n got %s\nwant %s", dump(got), dump(want))
	}
	u := want.Upstreams[0]
	if !reflect.DeepEqual(u.Retry, DefaultRetry()) || u.Pool != DefaultPool() || u.Timeouts != DefaultUpstreamTimeouts() {
		t.Error("an upstream's defaults differ from DefaultRetry, DefaultPool or DefaultUpstreamTimeouts")
	}
}

// TestParseEveryValue sets every key to a value other than its default.
func TestParseEveryValue(t *testing.T) {
	const file = `listen:
  - address: ":8080"
    tls:
      certificates:
        - {cert: a.pem, key: a.key}
        - cert: /etc/b.pem
          key: /etc/b.key
      min_version: 1.3
      client_auth: {ca: ca.pem, mode: verify_if_given}
  - address: "[::1]:0"
    redirect_https: true
    https_port: 8443
  - {address: "[::1]:0", protocols: [h2c, http/1.1]}
timeouts: {header: 5s, idle: 2m, drain: 0, body: 3s, send: 4s, stream_idle: 1h}
limits: {max_header_bytes: 1MiB, max_headers: 10000, max_idle_upstream_conns: 0, h2: {max_concurrent_streams: 10000, initial_window: 64KiB, max_header_list: 1MiB}, h3: {max_concurrent_streams: 10, max_header_list: 1KiB, idle_timeout: 5s, retry_above: 0, rapid_reset_streams: 1000000, rapid_reset_percent: 100}}
access_log: {enabled: false, format: JSON, path: /var/log/sluice.log, buffer: 0, flush: 250ms}
log: {level: debug, format: json}
forwarded: {x_forwarded_for: false, x_forwarded_proto: false, x_forwarded_host: false, via: false, request_id: false, trusted: [10.1.2.3/8, 127.0.0.1, "2001:db8::/32"], client_ip: x_forwarded_for}
metrics: {address: "localhost:9090"}
routes:
  - host: API.Example.com.
    path_prefix: /v1/
    upstream: a.b-c_1
  - host: "*.example.com"
    upstream: web
upstreams:
  a.b-c_1:
    servers:
      - address: backend.internal:1
        weight: 1000
        resolve: 30s
      - {address: "[2001:db8::1]:65535", backup: true}
    balance: hash
    hash_key: header:X-User
    health:
      passive: {max_fails: 0, fail_timeout: 5s, statuses: [500, 503], consecutive_failures: 0, base_ejection: 1s, max_ejection: 2s, max_ejected_percent: 100}
      active: {path: /healthz, method: head, host: app.internal, expect: [200, 204], body: ok, tcp: false, interval: 2s, timeout: 500ms, rise: 1, fall: 5}
      slow_start: 30s
    timeouts: {connect: 1ms, response_header: 1h, read: 1.5s, write: 1m30s}
    pool: {max_idle: 0, idle_timeout: 1s, max_requests: 5, max_age: 1h, non_idempotent: dial, non_idempotent_max_idle: 250ms}
    retry:
      tries: 20
      on: [HTTP_503, error, http_503, invalid_header, http_500, http_502, http_504, http_403, http_404, http_429, timeout]
      non_idempotent: always
      idempotency_header: X-Request-Id
      timeout: 10s
      backoff: {base: 1s, max: 1s}
      budget: {ratio: 1, min_per_second: 0.5}
      body_buffer: 0
    tls: {server_name: API.Internal., ca: /etc/ca.pem, cert: /etc/c.pem, key: /etc/k.pem, insecure_skip_verify: false}
  web:
    servers: [{address: "127.0.0.1:9001"}]
    retry: {tries: 5, on: []}
    tls:
    protocol: h2
`
	got, err := Parse("every.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		File: "every.yaml",
		Listen: []Listener{
			{Address: ":8080", Line: 2, TLS: &ListenerTLS{
				Certificates: []CertificateFiles{{Cert: "a.pem", Key: "a.key", Line: 5}, {Cert: "/etc/b.pem", Key: "/etc/b.key", Line: 6}},
				MinVersion:   "1.3",
				ClientAuth:   &ClientAuth{CA: "ca.pem", Mode: "verify_if_given", Line: 9},
			}},
			{Address: "[::1]:0", Line: 10, RedirectHTTPS: true, HTTPSPort: 8443},
			{Address: "[::1]:0", Line: 13, Protocols: []string{"h2c", "http/1.1"}},
		},
		Timeouts: Timeouts{Header: 5 * time.Second, Idle: 2 * time.Minute, Drain: 0, Body: 3 * time.Second, Send: 4 * time.Second, StreamIdle: time.Hour},
		Limits: Limits{MaxHeaderBytes: 1 << 20, MaxHeaders: 10000, MaxIdleUpstreamConns: 0,
			H2: H2Limits{MaxConcurrentStreams: 10000, InitialWindow: 64 << 10, MaxHeaderList: 1 << 20},
			H3: H3Limits{MaxConcurrentStreams: 10, MaxHeaderList: 1 << 10, IdleTimeout: 5 * time.Second,
				RetryAbove: 0, RapidResetStreams: 1000000, RapidResetPercent: 100}},
		AccessLog: AccessLog{Enabled: false, Format: "json", Path: "/var/log/sluice.log", Buffer: 0, Flush: 250 * time.Millisecond},
		Log:       Log{Level: "debug", Format: "json"},
		Forwarded: Forwarded{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("2001:db8::/32")}, ClientIP: "x_forwarded_for"},
		Metrics: Metrics{Address: "localhost:9090"},
		Routes: []Route{
			{Host: "api.example.com", PathPrefix: "/v1/", Upstream: "a.b-c_1", Line: 21},
			{Host: "*.example.com", Upstream: "web", Line: 24},
		},
		Upstreams: []*Upstream{{
			Name: "a.b-c_1",
			Line: 27,
			Servers: []Server{
				{Address: "backend.internal:1", Weight: 1000, Line: 29, Resolve: 30 * time.Second},
				{Address: "[2001:db8::1]:65535", Weight: 1, Line: 32, Backup: true, Resolve: 10 * time.Second},
			},
			Protocol: "http/1.1",
			Balance:  "hash",
			HashKey:  "header:X-User",
			Health: balance.Options{
				// max_fails: 0 and consecutive_failures: 0 turn the rules
				// off, which is -1 to balance.
				MaxFails: -1, FailTimeout: 5 * time.Second, Statuses: []int{500, 503}, ConsecutiveFailures: -1,
				BaseEjection: time.Second, MaxEjection: 2 * time.Second, MaxEjectedPercent: 100,
				Active: &balance.ActiveCheck{Path: "/healthz", Method: "HEAD", Host: "app.internal", Expect: []int{200, 204}, BodyContains: "ok",
					Interval: 2 * time.Second, Timeout: 500 * time.Millisecond, Rise: 1, Fall: 5},
				SlowStart: 30 * time.Second,
			},
			Timeouts: UpstreamTimeouts{
				Connect:        time.Millisecond,
				ResponseHeader: time.Hour,
				Read:           1500 * time.Millisecond,
				Write:          90 * time.Second,
			},
			Pool: Pool{MaxIdle: 0, IdleTimeout: time.Second, MaxRequests: 5, MaxAge: time.Hour, NonIdempotent: "dial", NonIdempotentMaxIdle: 250 * time.Millisecond},
			Retry: Retry{
				Tries: 20,
				On: []string{"http_503", "error", "invalid_header", "http_500", "http_502",
					"http_504", "http_403", "http_404", "http_429", "timeout"},
				NonIdempotent:     "always",
				IdempotencyHeader: "X-Request-Id",
				Timeout:           10 * time.Second,
				Backoff:           Backoff{Base: time.Second, Max: time.Second},
				Budget:            Budget{Ratio: 1, MinPerSecond: 0.5},
				BodyBuffer:        0,
			},
			TLS: &UpstreamTLS{ServerName: "api.internal", CA: "/etc/ca.pem", Cert: "/etc/c.pem", Key: "/etc/k.pem", Line: 50},
		}, {
			Name:     "web",
			Line:     51,
			Servers:  []Server{{Address: "127.0.0.1:9001", Weight: 1, Line: 52, Resolve: 10 * time.Second}},
			TLS:      &UpstreamTLS{Line: 54}, // "tls:" with no value: TLS with the defaults
			Protocol: "h2",
			Balance:  "p2c",
			HashKey:  "client_ip",
			Health:   DefaultHealth(),
			Timeouts: DefaultUpstreamTimeouts(),
			Pool:     DefaultPool(),
			Retry: func() Retry {
				r := DefaultRetry()
				r.Tries, r.On = 1, []string{} // tries forced to 1: no retry conditions
				return r
			}(),
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %s\nwant %s", dump(got), dump(want))
	}
}

func TestParseRetryOff(t *testing.T) {
	for _, on := range []string{"[]", "[off]", "[OFF, off]"} {
		file := minimal + "    retry: {tries: 7, on: " + on + "}\n"
		c, err := Parse("off.yaml", []byte(file))
		if err != nil {
			t.Fatalf("on: %s: %v", on, err)
		}
		if r := c.Upstreams[0].Retry; r.Tries != 1 || len(r.On) != 0 {
			t.Errorf("on: %s: got tries %d, on %q; want tries 1, on []", on, r.Tries, r.On)
		}
	}
}

// TestParseHealth checks the health keys' defaults and how the file's
// meanings are held in balance.Options: 0 turns a passive rule off (-1),
// [] counts no status (empty, not nil), and an active section starts from
// the documented defaults.
func TestParseHealth(t *testing.T) {
	passive := balance.Options{
		MaxFails:            3,
		FailTimeout:         10 * time.Second,
		Statuses:            []int{502, 503, 504},
		ConsecutiveFailures: 5,
		BaseEjection:        30 * time.Second,
		MaxEjection:         300 * time.Second,
		MaxEjectedPercent:   50,
	}
	with := func(change func(o *balance.Options)) balance.Options {
		o := passive
		o.Statuses = slices.Clone(passive.Statuses)
		change(&o)
		return o
	}
	activeDefaults := balance.ActiveCheck{Path: "/", Method: "GET", Expect: []int{200},
		Interval: 5 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}
	tests := []struct {
		name, health string
		want         balance.Options
	}{
		{"defaults", "", passive},
		{"an empty section", "{}", passive},
		{"max_fails off", "{passive: {max_fails: 0}}", with(func(o *balance.Options) { o.MaxFails = -1 })},
		{"consecutive_failures off", "{passive: {max_fails: 1, consecutive_failures: 0}}",
			with(func(o *balance.Options) { o.MaxFails, o.ConsecutiveFailures = 1, -1 })},
		{"no statuses", "{passive: {statuses: []}}", with(func(o *balance.Options) { o.Statuses = []int{} })},
		{"active, defaults", "{active: {}}", with(func(o *balance.Options) { a := activeDefaults; o.Active = &a })},
		{"active, tcp", "{active: {tcp: true, rise: 1}}", with(func(o *balance.Options) {
			a := activeDefaults
			a.TCP, a.Rise = true, 1
			o.Active = &a
		})},
		{"slow_start", "{slow_start: 30s}", with(func(o *balance.Options) { o.SlowStart = 30 * time.Second })},
	}
	for _, tt := range tests {
		file := minimal
		if tt.health != "" {
			file += "    health: " + tt.health + "\n"
		}
		c, err := Parse("health.yaml", []byte(file))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := c.Upstreams[0].Health; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v (active %+v), want %+v (active %+v)", tt.name, got, got.Active, tt.want, tt.want.Active)
		}
	}
}

func TestParseMergeKeys(t *testing.T) {
	const file = `listen: [{address: "127.0.0.1:8080"}]
routes: [{upstream: a}, {upstream: b}]
upstreams:
  a:
    servers: [{address: "127.0.0.1:9001"}]
    retry: &retry
      tries: 5
      on: [error]
  b:
    servers: [{address: "127.0.0.1:9002"}]
    retry:
      <<: *retry
      tries: 2
`
	c, err := Parse("merge.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Upstreams[0].Retry, c.Upstreams[1].Retry
	if a.Tries != 5 || b.Tries != 2 || !slices.Equal(b.On, []string{"error"}) {
		t.Errorf("got a.tries %d, b.tries %d, b.on %q; want 5, 2, [error]", a.Tries, b.Tries, b.On)
	}
}

// TestParseProblem checks one bad input at a time: each must give
// exactly one problem, at the line, column and key path given, with a
// message containing msg.
func TestParseProblem(t *testing.T) {
	// upstream completes a file that lacks only its upstreams.
	const upstream = "upstreams:\n  web:\n    servers: [{address: \"127.0.0.1:9001\"}]\n"
	// head starts a file that lacks only the rest of upstream web.
	const head = "listen: [{address: \"127.0.0.1:8080\"}]\nroutes: [{upstream: web}]\nupstreams:\n  web:\n"

	tests := []struct {
		name      string
		file      string
		line, col int
		path, msg string
	}{
		{"empty file", "", 0, 0, "", "the file is empty; a config needs at least listen, routes and upstreams"},
		{"only comments", "# nothing\n\n", 0, 0, "", "the file is empty"},
		{"not a mapping", "- listen\n", 1, 1, "", "must hold a mapping with listen, routes and upstreams, not a list"},
		{"YAML syntax", "listen: []\nroutes: x: y\n", 2, 0, "", "invalid YAML: mapping values are not allowed"},
		// yaml.v3 names the block the parser was in (line 7, counted from
		// 0, for the mapping of web on line 8); the line is the key's.
		{"YAML key indented too little", minimal + "    retry:\n      tries: 3\n     timeout: 5s\n", 11, 0, "",
			"invalid YAML: did not find expected key (check this line's indentation)"},
		{"YAML key indented between levels", minimal + "    retry:\n      tries: 3\n   timeout: 5s\n", 11, 0, "",
			"invalid YAML: did not find expected key (check this line's indentation)"},
		{"YAML key indented too much", minimal + "    retry:\n      tries: 3\n        timeout: 5s\n", 11, 0, "",
			"invalid YAML: mapping values are not allowed in this context"},
		{"YAML bad key after a flow list over lines", minimal + "    retry:\n      on: [error,\n           timeout]\n      tries: 3\n     timeout: 5s\n", 13, 0, "",
			"invalid YAML: did not find expected key"},
		{"YAML tab", minimal + "    retry:\n\ttries: 3\n", 10, 0, "", "invalid YAML: found character that cannot start any token"},
		{"YAML list item indented too little", "listen:\n  - address: 127.0.0.1:8080\n - address: 127.0.0.1:8081\nroutes: [{upstream: web}]\n", 3, 0, "",
			"invalid YAML: did not find expected key (check this line's indentation)"},
		{"two documents", minimal + "---\nlisten: []\n", 9, 1, "", "one YAML document"},
		{"missing listen", "routes: [{upstream: web}]\n" + upstream, 1, 1, "listen", "missing"},
		{"missing routes", "listen: [{address: \"127.0.0.1:8080\"}]\n" + upstream, 1, 1, "routes", "missing"},
		{"missing upstreams", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes: [{upstream: web}]\n", 1, 1, "upstreams", "missing"},
		{"empty listen", "listen: []\nroutes: [{upstream: web}]\n" + upstream, 1, 9, "listen", "at least one listener"},
		{"empty routes", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n" + upstream, 2, 8, "routes", "at least one route"},
		{"empty upstreams", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes: [{upstream: web}]\nupstreams: {}\n", 3, 12, "upstreams", "at least one upstream"},
		{"unknown top-level key", "listen: [{address: \"127.0.0.1:8080\"}]\nroutez: [{upstream: web}]\nroutes: [{upstream: web}]\n" + upstream,
			2, 1, "routez", `unknown key (did you mean "routes"?)`},
		{"unknown key, no suggestion", minimal + "tls: {}\n", 9, 1, "tls", "unknown key"},
		{"unknown nested key", "listen:\n  - adress: 127.0.0.1:8080\nroutes: [{upstream: web}]\n" + upstream,
			2, 5, "listen[0].adress", `unknown key (did you mean "address"?)`},
		{"unknown deep key", minimal + "    retry:\n      backof: {base: 1s}\n", 10, 7, "upstreams.web.retry.backof", `did you mean "backoff"?`},
		{"duplicate key", minimal + "listen: []\n", 9, 1, "listen", "duplicate key (first given at line 1)"},
		{"duplicate upstream", minimal + "  web:\n    servers: [{address: \"127.0.0.1:9002\"}]\n", 9, 3, "upstreams.web", "duplicate key (first given at line 6)"},
		{"tries 0", minimal + "    retry:\n      tries: 0\n", 10, 14, "upstreams.web.retry.tries",
			"must be >= 1 (it counts attempts, the first included); 0 would mean no attempt at all"},
		{"tries -1", minimal + "    retry: {tries: -1}\n", 9, 20, "upstreams.web.retry.tries", "must be >= 1 (it counts attempts"},
		{"tries 21", minimal + "    retry: {tries: 21}\n", 9, 20, "upstreams.web.retry.tries", "must be <= 20"},
		{"tries abc", minimal + "    retry: {tries: abc}\n", 9, 20, "upstreams.web.retry.tries", `must be a whole number, not "abc"`},
		{"tries quoted", minimal + "    retry: {tries: \"3\"}\n", 9, 20, "upstreams.web.retry.tries", `must be a whole number, not "3"`},
		{"tries 1.5", minimal + "    retry: {tries: 1.5}\n", 9, 20, "upstreams.web.retry.tries", "must be a whole number, not the number 1.5"},
		{"tries null", minimal + "    retry: {tries: }\n", 9, 20, "upstreams.web.retry.tries", "no value given"},
		{"duration with space", minimal + "timeouts:\n  header: 10 s\n", 10, 11, "timeouts.header", `invalid duration "10 s"`},
		{"negative duration", minimal + "timeouts: {drain: -5s}\n", 9, 19, "timeouts.drain", "must not be negative"},
		{"duration without unit", minimal + "timeouts: {drain: 30}\n", 9, 19, "timeouts.drain", "30 has no unit"},
		{"zero where positive", minimal + "    timeouts: {connect: 0}\n", 9, 25, "upstreams.web.timeouts.connect", "must be > 0"},
		{"unknown balance", minimal + "    balance: fastest\n", 9, 14, "upstreams.web.balance", "fastest"},
		{"hash_key without hash", minimal + "    hash_key: uri\n", 9, 15, "upstreams.web.hash_key", "only used with balance: hash"},
		{"bad hash_key", minimal + "    balance: hash\n    hash_key: body\n", 10, 15, "upstreams.web.hash_key", "client_ip, header:NAME"},
		{"status out of range", minimal + "    health: {passive: {statuses: [502, 700]}}\n", 9, 40, "upstreams.web.health.passive.statuses[1]", "between 100 and 599"},
		{"max_fails -1", minimal + "    health: {passive: {max_fails: -1}}\n", 9, 35, "upstreams.web.health.passive.max_fails", "must be >= 0"},
		{"consecutive_failures -1", minimal + "    health: {passive: {consecutive_failures: -1}}\n", 9, 46,
			"upstreams.web.health.passive.consecutive_failures", "must be >= 0"},
		{"active path", minimal + "    health: {active: {path: healthz}}\n", 9, 29, "upstreams.web.health.active.path", "must start with /"},
		{"decimal size", minimal + "limits:\n  max_header_bytes: 64kb\n", 10, 21, "limits.max_header_bytes", `decimal unit "kb" is ambiguous (1000 or 1024?); use a binary unit, such as 64KiB`},
		{"size MB", minimal + "    retry: {body_buffer: 1MB}\n", 9, 26, "upstreams.web.retry.body_buffer", "such as 1MiB"},
		{"size case", minimal + "    retry: {body_buffer: 1mib}\n", 9, 26, "upstreams.web.retry.body_buffer", "units are case-sensitive: write 1MiB"},
		{"size too small", minimal + "limits: {max_header_bytes: 1000}\n", 9, 28, "limits.max_header_bytes", "must be between 1KiB and 1MiB"},
		{"size too large", minimal + "    retry: {body_buffer: 65MiB}\n", 9, 26, "upstreams.web.retry.body_buffer", "must be between 0B and 64MiB"},
		{"size fraction", minimal + "    retry: {body_buffer: 1.5KiB}\n", 9, 26, "upstreams.web.retry.body_buffer", "invalid size"},
		{"unknown retry condition", minimal + "    retry:\n      on: [error, http_501]\n", 10, 19, "upstreams.web.retry.on[1]", `unknown retry condition "http_501"`},
		{"off with others", minimal + "    retry:\n      on: [error, off]\n", 10, 19, "upstreams.web.retry.on[1]", "off may not be combined"},
		{"on not a list", minimal + "    retry: {on: off}\n", 9, 17, "upstreams.web.retry.on", "must be a list, such as [off]"},
		{"bad non_idempotent", minimal + "    retry:\n      non_idempotent: sometimes\n", 10, 23, "upstreams.web.retry.non_idempotent",
			`unknown value "sometimes"; want one of never, keyed, always`},
		{"bad pool non_idempotent", minimal + "    pool: {non_idempotent: always}\n", 9, 28, "upstreams.web.pool.non_idempotent",
			`unknown value "always"; want one of learn, dial, reuse`},
		{"non_idempotent_max_idle of zero", minimal + "    pool: {non_idempotent_max_idle: 0s}\n", 9, 37, "upstreams.web.pool.non_idempotent_max_idle",
			"must be > 0; for a new connection per such request, set non_idempotent: dial"},
		{"bad idempotency header", minimal + "    retry: {idempotency_header: \"Idem Key\"}\n", 9, 33, "upstreams.web.retry.idempotency_header", "not a valid HTTP field name"},
		{"backoff max below base", minimal + "    retry: {backoff: {base: 2s, max: 1s}}\n", 9, 38, "upstreams.web.retry.backoff.max", "must be >= backoff.base (2s)"},
		{"backoff base above default max", minimal + "    retry: {backoff: {base: 2s}}\n", 9, 29, "upstreams.web.retry.backoff.base", "must be <= backoff.max (1s by default)"},
		{"budget ratio", minimal + "    retry: {budget: {ratio: 1.5}}\n", 9, 29, "upstreams.web.retry.budget.ratio", "must be between 0 and 1"},
		{"budget min_per_second", minimal + "    retry: {budget: {min_per_second: -1}}\n", 9, 38, "upstreams.web.retry.budget.min_per_second", "must be >= 0"},
		{"budget nan", minimal + "    retry: {budget: {ratio: .nan}}\n", 9, 29, "upstreams.web.retry.budget.ratio", "must be a number"},
		{"route to undefined upstream", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - upstream: wbe\n" + upstream,
			3, 15, "routes[0].upstream", `no upstream named "wbe" (did you mean "web"?) (defined: web)`},
		{"route without upstream", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - host: a.example\n" + upstream,
			3, 5, "routes[0].upstream", "missing"},
		{"path_prefix without slash", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - path_prefix: v1/\n    upstream: web\n" + upstream,
			3, 18, "routes[0].path_prefix", `must start with "/"`},
		{"path_prefix with query", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - {path_prefix: \"/a?b\", upstream: web}\n" + upstream,
			3, 19, "routes[0].path_prefix", `must not contain '?'`},
		{"path_prefix not ASCII", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - {path_prefix: /café, upstream: web}\n" + upstream,
			3, 19, "routes[0].path_prefix", "percent-encode"},
		{"host with port", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - {host: a.example:80, upstream: web}\n" + upstream,
			3, 12, "routes[0].host", "must not include a port"},
		{"host wildcard inside", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - {host: a.*.example, upstream: web}\n" + upstream,
			3, 12, "routes[0].host", "not a valid host"},
		{"missing servers", head + "    retry: {tries: 2}\n", 4, 3, "upstreams.web.servers", "missing; an upstream needs at least one server"},
		{"null upstream", head, 4, 3, "upstreams.web.servers", "missing"},
		{"empty servers", head + "    servers: []\n", 5, 14, "upstreams.web.servers", "at least one server"},
		{"bad upstream name", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes: [{upstream: w/b}]\nupstreams:\n  w/b:\n    servers: [{address: \"127.0.0.1:9001\"}]\n",
			4, 3, "upstreams.w/b", "an upstream name may only hold"},
		{"weight 0", head + "    servers:\n      - address: 127.0.0.1:9001\n        weight: 0\n", 7, 17, "upstreams.web.servers[0].weight", "must be between 1 and 1000"},
		{"server without address", head + "    servers:\n      - weight: 2\n", 6, 9, "upstreams.web.servers[0].address", "missing"},
		{"server address without port", head + "    servers:\n      - address: localhost\n", 6, 18, "upstreams.web.servers[0].address",
			`"localhost" is not a host:port address: missing port in address`},
		{"server port 0", head + "    servers: [{address: \"localhost:0\"}]\n", 5, 25, "upstreams.web.servers[0].address", "the port must be a number in 1..65535"},
		{"server without host", head + "    servers: [{address: \":80\"}]\n", 5, 25, "upstreams.web.servers[0].address", "has no host"},
		{"listen address without port", "listen:\n  - address: localhost\nroutes: [{upstream: web}]\n" + upstream, 2, 14, "listen[0].address", "missing port in address"},
		{"listen port too large", "listen:\n  - address: \"127.0.0.1:65536\"\nroutes: [{upstream: web}]\n" + upstream, 2, 14, "listen[0].address", "0..65535"},
		{"listen named port", "listen:\n  - address: \"127.0.0.1:http\"\nroutes: [{upstream: web}]\n" + upstream, 2, 14, "listen[0].address", "0..65535"},
		{"listen host with space", "listen:\n  - address: \"my host:80\"\nroutes: [{upstream: web}]\n" + upstream, 2, 14, "listen[0].address", "neither an IP address nor a DNS name"},
		{"duplicate listen address", "listen:\n  - address: 127.0.0.1:8080\n  - address: 127.0.0.1:8080\nroutes: [{upstream: web}]\n" + upstream,
			3, 14, "listen[1].address", "listed twice (first at line 2)"},
		{"metrics on a listen address", minimal + "metrics: {address: \"127.0.0.1:8080\"}\n", 9, 20, "metrics.address", "same address as the listener at line 2"},
		{"admin on a listen address", minimal + "admin: {address: \"127.0.0.1:8080\"}\n", 9, 18, "admin.address", "same address as the listener at line 2"},
		{"admin on the metrics address", minimal + "metrics: {address: \"127.0.0.1:9090\"}\nadmin: {address: \"127.0.0.1:9090\"}\n", 10, 18, "admin.address", "same address as metrics.address (line 9)"},
		{"admin pprof not a boolean", minimal + "admin: {pprof: 1}\n", 9, 16, "admin.pprof", "must be true or false"},
		{"listen not a list", "listen: 127.0.0.1:8080\nroutes: [{upstream: web}]\n" + upstream, 1, 9, "listen", `must be a list, not "127.0.0.1:8080"`},
		{"section not a mapping", minimal + "limits: 5\n", 9, 9, "limits", "must be a mapping of keys to values, not the number 5"},
		{"bad enum", minimal + "log: {level: verbose}\n", 9, 14, "log.level", `unknown value "verbose"; want one of debug, info, warn, error`},
		{"enum typo", minimal + "access_log: {format: jsn}\n", 9, 22, "access_log.format", `(did you mean "json"?)`},
		{"access log format of an unknown field", minimal + "access_log:\n  format: '$client $clinet $status'\n", 10, 11, "access_log.format",
			"at byte 8: unknown field $clinet (did you mean $client?)"},
		{"access log format with a bare $", minimal + "access_log: {format: \"$status costs 5 $\"}\n", 9, 22, "access_log.format",
			"at byte 16: a $ must start a field name"},
		{"access log format neither named nor of fields", minimal + "access_log: {format: comined}\n", 9, 22, "access_log.format",
			`unknown value "comined" (did you mean "combined"?); want text, json, combined, or a format of fields`},
		{"YAML 1.1 boolean", minimal + "forwarded: {via: yes}\n", 9, 18, "forwarded.via", `must be true or false, not "yes"`},
		{"client_ip without trusted peers", minimal + "forwarded: {client_ip: x_forwarded_for}\n", 9, 24, "forwarded.client_ip", "needs forwarded.trusted"},
		{"client_ip unknown", minimal + "forwarded: {client_ip: real_ip, trusted: [10.0.0.0/8]}\n", 9, 24, "forwarded.client_ip", "want one of peer, x_forwarded_for"},
		{"number as boolean", minimal + "access_log: {enabled: 1}\n", 9, 23, "access_log.enabled", "must be true or false, not the number 1"},
		{"string given a list", minimal + "access_log: {path: [a]}\n", 9, 20, "access_log.path", "must be a single value, not a list"},
		{"access log buffer too large", minimal + "access_log: {buffer: 32MiB}\n", 9, 22, "access_log.buffer", "must be between 0B and 16MiB"},
		{"access log flush of zero", minimal + "access_log: {flush: 0}\n", 9, 21, "access_log.flush", "must be > 0"},
		{"merge of a scalar", minimal + "    <<: 5\n", 9, 9, "upstreams.web", "a merge key (<<) must refer to a mapping"},
		{"tls cert without key", minimal + "    tls: {cert: /c.pem}\n", 9, 17, "upstreams.web.tls.cert", "needs key"},
		{"tls key without cert", minimal + "    tls: {key: /k.pem}\n", 9, 16, "upstreams.web.tls.key", "needs cert"},
		{"tls ca and insecure_skip_verify", minimal + "    tls: {ca: /ca.pem, insecure_skip_verify: true}\n", 9, 46,
			"upstreams.web.tls.insecure_skip_verify", "ca would go unused"},
		{"tls server_name with a port", minimal + "    tls: {server_name: \"api.internal:443\"}\n", 9, 24, "upstreams.web.tls.server_name", "must not include a port"},
		{"tls server_name not a name", minimal + "    tls: {server_name: a b}\n", 9, 24, "upstreams.web.tls.server_name", "not a valid name"},
		{"tls empty ca", minimal + "    tls: {ca: \"\"}\n", 9, 15, "upstreams.web.tls.ca", "must not be empty"},
		{"tls unknown key", minimal + "    tls: {sni: api.internal}\n", 9, 11, "upstreams.web.tls.sni", "unknown key"},
		{"tls not a mapping", minimal + "    tls: true\n", 9, 10, "upstreams.web.tls", "must be a mapping"},
		{"unix without a path", head + "    servers: [{address: \"unix:\"}]\n", 5, 25, "upstreams.web.servers[0].address", `"unix:" has no socket path`},
		{"unix relative path", head + "    servers: [{address: \"unix:run/app.sock\"}]\n", 5, 25, "upstreams.web.servers[0].address", "must be absolute"},
		{"unix path too long", head + "    servers: [{address: \"unix:/" + strings.Repeat("a", 107) + "\"}]\n", 5, 25,
			"upstreams.web.servers[0].address", "is 108 bytes long; a Unix socket's may be at most 107"},
		{"unix listener with a relative path", "listen: [{address: \"unix:run/s.sock\"}]\nroutes: [{upstream: web}]\n" + upstream, 1, 20, "listen[0].address", "the socket path must be absolute"},
		{"mode on a TCP listener", "listen:\n  - {address: 127.0.0.1:8080, mode: 0660}\nroutes: [{upstream: web}]\n" + upstream, 2, 37, "listen[0].mode",
			`is the mode of a Unix socket's file, for a unix: address; the address here is "127.0.0.1:8080"`},
		{"mode not octal", "listen:\n  - {address: \"unix:/run/s.sock\", mode: 0680}\nroutes: [{upstream: web}]\n" + upstream, 2, 41, "listen[0].mode",
			`"0680" is not a file mode: want octal digits as chmod takes them, at most 0777`},
		{"mode too large", "listen:\n  - {address: \"unix:/run/s.sock\", mode: 01777}\nroutes: [{upstream: web}]\n" + upstream, 2, 41, "listen[0].mode", "at most 0777"},
		{"acme on a unix listener", "listen:\n  - address: \"unix:/run/s.sock\"\n    tls: {acme: {domains: [example.com]}}\nroutes: [{upstream: web}]\n" + upstream,
			2, 5, "listen[0].tls.acme", "needs a TCP listener: the CA connects to port 443 (or 80)"},
		{"admin mode without a unix address", minimal + "admin: {address: 127.0.0.1:9901, mode: 0600}\n", 9, 40, "admin.mode", "for a unix: address"},
		{"trusted neither prefix nor unix:", minimal + "forwarded: {trusted: [unix]}\n", 9, 23, "forwarded.trusted[0]", "or unix: for the peers of Unix socket listeners"},
		{"unix with tls", head + "    servers: [{address: \"127.0.0.1:1\"}, {address: \"unix:/run/app.sock\"}]\n    tls: {}\n", 6, 10,
			"upstreams.web.tls", "TLS to a Unix socket (unix:/run/app.sock) is not supported"},
		{"upstream host with a slash", minimal + "    host: a/b\n", 9, 11, "upstreams.web.host", "must be a host name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("t.yaml", []byte(tt.file))
			if c != nil {
				t.Errorf("Parse returned a config along with error %v", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse: got error %v (%T), want an *Error", err, err)
			}
			if len(e.Problems) != 1 {
				t.Fatalf("got %d problems, want 1:\n%v", len(e.Problems), err)
			}
			p := e.Problems[0]
			if p.File != "t.yaml" || p.Line != tt.line || (tt.col != 0 && p.Column != tt.col) || p.Path != tt.path || !strings.Contains(p.Msg, tt.msg) {
				t.Errorf("got  %#v\nwant line %d, column %d, path %q, message containing %q", p, tt.line, tt.col, tt.path, tt.msg)
			}
		})
	}
}

func TestParseReportsAllProblems(t *testing.T) {
	const file = `listen:
  - adress: 127.0.0.1:8080
timeouts: {header: 10 s, idle: -1s}
routes:
  - path_prefix: v1
    upstream: apii
upstreams:
  api:
    servers: [{address: "127.0.0.1:9001", weight: 0}]
    retry:
      tries: 0
      on: [error, http_501, off]
      non_idempotent: sometimes
  web: {}
`
	_, err := Parse("many.yaml", []byte(file))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an *Error", err)
	}
	want := []string{
		`many.yaml:2:5: listen[0].adress: unknown key (did you mean "address"?)`,
		`many.yaml:3:20: timeouts.header: invalid duration "10 s"; want a Go duration such as 250ms, 30s or 1m`,
		`many.yaml:3:32: timeouts.idle: must not be negative`,
		`many.yaml:5:18: routes[0].path_prefix: must start with "/"`,
		`many.yaml:6:15: routes[0].upstream: no upstream named "apii" (did you mean "api"?) (defined: api, web)`,
		`many.yaml:9:51: upstreams.api.servers[0].weight: must be between 1 and 1000`,
		`many.yaml:11:14: upstreams.api.retry.tries: must be >= 1 (it counts attempts, the first included); 0 would mean no attempt at all`,
		`many.yaml:12:19: upstreams.api.retry.on[1]: unknown retry condition "http_501"; want one of error, timeout, invalid_header, http_500, http_502, http_503, http_504, http_403, http_404, http_429, or off`,
		`many.yaml:12:29: upstreams.api.retry.on[2]: off may not be combined with retry conditions; write [off] alone for no retries`,
		`many.yaml:13:23: upstreams.api.retry.non_idempotent: unknown value "sometimes"; want one of never, keyed, always`,
		`many.yaml:14:3: upstreams.web.servers: missing; an upstream needs at least one server`,
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseProblemCap(t *testing.T) {
	var b strings.Builder
	b.WriteString(minimal)
	for i := range 3 * maxProblems {
		b.WriteString("k" + strings.Repeat("x", i) + ": 1\n")
	}
	_, err := Parse("cap.yaml", []byte(b.String()))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an *Error", err)
	}
	if n := len(e.Problems); n != maxProblems+1 {
		t.Errorf("got %d problems, want %d", n, maxProblems+1)
	}
	if last := e.Problems[len(e.Problems)-1]; last.Msg != "too many problems; stopped after 100" || last.Line != 0 {
		t.Errorf("last problem %+v, want the stopping note", last)
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{File: "s.yaml", Line: 12, Column: 7, Path: "a.b", Msg: "bad"}, "s.yaml:12:7: a.b: bad"},
		{Problem{File: "s.yaml", Line: 3, Path: "a", Msg: "bad"}, "s.yaml:3: a: bad"},
		{Problem{File: "s.yaml", Msg: "empty"}, "s.yaml: empty"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.p, got, tt.want)
		}
	}
	e := &Error{Problems: []Problem{tests[0].p, tests[2].p}}
	if got, want := e.Error(), "s.yaml:12:7: a.b: bad\ns.yaml: empty"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestValues checks the parsing of single values of each kind.
func TestValues(t *testing.T) {
	tests := []struct {
		kind string
		in   string
		want any    // nil when an error is expected
		msg  string // part of the error message
	}{
		{"duration", "250ms", 250 * time.Millisecond, ""},
		{"duration", "1m30s", 90 * time.Second, ""},
		{"duration", "0", time.Duration(0), ""},
		{"duration", `"0"`, time.Duration(0), ""},
		{"duration", "0s", time.Duration(0), ""},
		{"duration", "-0s", time.Duration(0), ""},
		{"duration", "0.0", time.Duration(0), ""},
		{"duration", "5", nil, "has no unit"},
		{"duration", "10 s", nil, "invalid duration"},
		{"duration", "1d", nil, "invalid duration"},
		{"duration", "-1ms", nil, "must not be negative"},
		{"duration", "[1s]", nil, "must be a single value"},
		{"size", "0", int64(0), ""},
		{"size", "65536", int64(65536), ""},
		{"size", "0x100", int64(256), ""},
		{"size", "10B", int64(10), ""},
		{"size", "64KiB", int64(64 << 10), ""},
		{"size", "2MiB", int64(2 << 20), ""},
		{"size", "3GiB", int64(3 << 30), ""},
		{"size", `"512"`, int64(512), ""},
		{"size", "8GiB", int64(8 << 30), ""},
		{"size", "64kb", nil, "decimal unit"},
		{"size", "64K", nil, "decimal unit"},
		{"size", "1GB", nil, "such as 1GiB"},
		{"size", "64kib", nil, "write 64KiB"},
		{"size", "64 KiB", nil, "without a space, as 64KiB"},
		{"size", "64TiB", nil, "unknown unit"},
		{"size", "-1", nil, "must be between"},
		{"size", "9999999999GiB", nil, "too large"},
		{"size", "KiB", nil, "invalid size"},
		{"int", "7", 7, ""},
		{"int", "-7", nil, "must be >= 0"},
		{"int", "99999999999999999999", nil, "must be a whole number"},
		{"int", "true", nil, "must be a whole number, not true"},
		{"float", "0.25", 0.25, ""},
		{"float", "3", 3.0, ""},
		{"float", ".inf", nil, "must be a number"},
		{"float", "x", nil, "must be a number"},
		{"bool", "true", true, ""},
		{"bool", "False", false, ""},
		{"bool", "off", nil, `not "off"`},
	}
	for _, tt := range tests {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(tt.in), &doc); err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		n := doc.Content[0]
		d := &decoder{file: "v.yaml"}
		var got any
		switch tt.kind {
		case "duration":
			var v time.Duration
			d.duration(&v, false)(n, "v")
			got = v
		case "size":
			var v int64
			d.size(&v, 0, 1<<62)(n, "v")
			got = v
		case "int":
			var v int
			d.integer(&v, atLeast(0))(n, "v")
			got = v
		case "float":
			var v float64
			d.float(&v, 0, -1)(n, "v")
			got = v
		case "bool":
			var v bool
			d.boolean(&v)(n, "v")
			got = v
		}
		switch {
		case tt.want == nil && len(d.problems) != 1:
			t.Errorf("%s %s: got %v, %d problems; want one problem", tt.kind, tt.in, got, len(d.problems))
		case tt.want == nil && !strings.Contains(d.problems[0].Msg, tt.msg):
			t.Errorf("%s %s: got message %q, want it to contain %q", tt.kind, tt.in, d.problems[0].Msg, tt.msg)
		case tt.want != nil && len(d.problems) != 0:
			t.Errorf("%s %s: unexpected problem %v", tt.kind, tt.in, d.problems[0])
		case tt.want != nil && got != tt.want:
			t.Errorf("%s %s: got %v, want %v", tt.kind, tt.in, got, tt.want)
		}
	}
}

func TestCheckHost(t *testing.T) {
	tests := []struct{ in, want, msg string }{
		{"api.example.com", "api.example.com", ""},
		{"API.Example.COM", "api.example.com", ""},
		{"example.com.", "example.com", ""},
		{"*.example.com", "*.example.com", ""},
		{"localhost", "localhost", ""},
		{"10.0.0.1", "10.0.0.1", ""},
		{"[::1]", "[::1]", ""},
		{"[::1", "", "bracketed"},
		{"[example.com]", "", "bracketed"},
		{"", "", "must not be empty"},
		{"*", "", `"*" alone`},
		{"*.", "", `"*" alone`},
		{"a..b", "", "not a valid host"},
		{"a.*.b", "", "not a valid host"},
		{"**.b", "", "not a valid host"},
		{"a b", "", "not a valid host"},
		{"a.example:443", "", "must not include a port"},
	}
	for _, tt := range tests {
		got, msg := checkHost(tt.in)
		if got != tt.want || !strings.Contains(msg, tt.msg) || (tt.msg == "") != (msg == "") {
			t.Errorf("checkHost(%q) = %q, %q; want %q, %q", tt.in, got, msg, tt.want, tt.msg)
		}
	}
}

func TestSuggestion(t *testing.T) {
	known := []string{"address", "weight", "on", "tries", "timeout", "timeouts"}
	tests := []struct{ in, want string }{
		{"adress", "address"},
		{"Address", "address"},
		{"wieght", "weight"},
		{"trys", "tries"},
		{"timeoutss", "timeouts"},
		{"of", "on"},
		{"ox", "on"},
		{"xy", ""},
		{"servers", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := suggestion(tt.in, known); got != tt.want {
			t.Errorf("suggestion(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLoadFull(t *testing.T) {
	c, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.File != "testdata/full.yaml" || len(c.Listen) != 7 || len(c.Routes) != 10 || len(c.Upstreams) != 2 {
		t.Errorf("got file %q, %d listeners, %d routes, %d upstreams; want testdata/full.yaml, 7, 10, 2",
			c.File, len(c.Listen), len(c.Routes), len(c.Upstreams))
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	if web := c.Upstreams[1]; web.Name != "web" || web.Retry.Tries != 1 || len(web.Retry.On) != 0 {
		t.Errorf("upstream web: got %+v", web)
	}
}

// TestParseUnixListeners: unix: addresses for listen and admin, with their
// modes (default 0666) in each octal spelling, and "unix:" in trusted.
func TestParseUnixListeners(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`listen:
  - {address: 127.0.0.1:8080}
  - {address: "unix:/run/sluice/a.sock"}
  - {address: "unix:/run/sluice/b.sock", mode: 0660}
  - {address: "unix:/run/sluice/c.sock", mode: "0o640"}
  - {address: "unix:/run/sluice/d.sock", mode: 600}
admin: {address: "unix:/run/sluice/admin.sock", mode: 0600}
metrics: {address: "unix:/run/sluice/metrics.sock"}
forwarded: {trusted: ["unix:", 10.0.0.0/8], client_ip: x_forwarded_for}
routes: [{upstream: web}]
upstreams: {web: {servers: [{address: 127.0.0.1:9001}]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []fs.FileMode{0, 0o666, 0o660, 0o640, 0o600} {
		if got := c.Listen[i].Mode; got != want {
			t.Errorf("listen[%d] (%s) mode %v, want %v", i, c.Listen[i].Address, got, want)
		}
	}
	if c.Admin.Mode != 0o600 || c.Admin.Address != "unix:/run/sluice/admin.sock" || c.Metrics.Address != "unix:/run/sluice/metrics.sock" {
		t.Errorf("admin %+v, metrics %+v", c.Admin, c.Metrics)
	}
	if !c.Forwarded.TrustUnix || len(c.Forwarded.Trusted) != 1 || c.Forwarded.Trusted[0].String() != "10.0.0.0/8" {
		t.Errorf("forwarded.trusted: %v, TrustUnix %v", c.Forwarded.Trusted, c.Forwarded.TrustUnix)
	}
	// Trusting unix: alone is enough for client_ip: x_forwarded_for.
	if _, err := Parse("t.yaml", []byte(minimal+"forwarded: {trusted: [\"unix:\"], client_ip: x_forwarded_for}\n")); err != nil {
		t.Errorf("trusted [unix:] with client_ip x_forwarded_for: %v", err)
	}
}

// TestFullUsesEveryKey checks that testdata/full.yaml, the documented
// example, uses every key the schema knows.
func TestFullUsesEveryKey(t *testing.T) {
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := &decoder{file: "testdata/full.yaml", schema: map[string]bool{}} // its static root is relative to it
	if _, err := d.parse(data); err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				key := n.Content[i].Value
				if path == "upstreams" || path == "cache.stores" {
					key = "*"
				}
				p := join(path, key)
				used[p] = true
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for _, e := range n.Content {
				walk(e, path+"[]")
			}
		}
	}
	walk(doc.Content[0], "")
	if len(d.schema) < 50 {
		t.Fatalf("only %d schema keys recorded", len(d.schema))
	}
	for k := range d.schema {
		if !used[k] {
			t.Errorf("testdata/full.yaml does not use %s", k)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/no-such-file.yaml")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want an error matching fs.ErrNotExist", err)
	}
}

func TestDefaultRetryIsFresh(t *testing.T) {
	a := DefaultRetry()
	a.On[0] = "changed"
	if b := DefaultRetry(); b.On[0] != "error" {
		t.Errorf("DefaultRetry shares its On slice between calls")
	}
}

// FuzzParse checks that Parse never panics and returns either a config
// or an *Error with at least one problem, each with a message.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(""))
	f.Add([]byte("a: &a\n  <<: *a\n"))
	f.Add([]byte("upstreams: {a: &u {servers: [{address: \"x:1\"}], retry: {<<: [*u, *u]}}}\n"))
	if data, err := os.ReadFile("testdata/full.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err == nil {
			if c == nil {
				t.Fatal("nil config and nil error")
			}
			return
		}
		var e *Error
		if c != nil || !errors.As(err, &e) || len(e.Problems) == 0 {
			t.Fatalf("got config %v, error %v (%T)", c != nil, err, err)
		}
		for _, p := range e.Problems {
			if p.Msg == "" || p.Line < 0 || p.Column < 0 {
				t.Fatalf("bad problem %#v", p)
			}
		}
	})
}

// dump formats c for failure messages, upstreams included.
func dump(c *Config) string {
	s := fmt.Sprintf("%+v", *c)
	for _, u := range c.Upstreams {
		s += fmt.Sprintf("\n  upstream %+v", *u)
		if u.TLS != nil {
			s += fmt.Sprintf("\n    tls %+v", *u.TLS)
		}
	}
	return s
}

func TestParseAdmin(t *testing.T) {
	c, err := Parse("t.yaml", []byte(minimal+"admin: {address: \"127.0.0.1:9901\", pprof: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin != (Admin{Address: "127.0.0.1:9901", Pprof: true}) {
		t.Errorf("admin = %+v", c.Admin)
	}
	c, err = Parse("t.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin != (Admin{}) {
		t.Errorf("admin by default = %+v, want off", c.Admin)
	}
}

// TestAccessHandler: a Config made by a program, with a format of fields
// nobody parsed, gets it parsed when built; a bad one fails the build.
func TestAccessHandler(t *testing.T) {
	for _, tt := range []struct {
		format, want, err string
	}{
		{"text", "level=INFO msg=request status=204\n", ""},
		{"$status $method", "204 -\n", ""},
		{"combined", `- - - [`, ""},
		{"$nosuch", "", "format: at byte 0: unknown field $nosuch"},
	} {
		h, err := accessHandler(AccessLog{Format: tt.format})
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %v, want %q", tt.format, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.format, err)
		}
		var b strings.Builder
		slog.New(h(&b)).Info("request", "status", 204)
		if got := b.String(); !strings.Contains(got, tt.want) {
			t.Errorf("%s: line %q, want %q in it", tt.format, got, tt.want)
		}
	}
}
