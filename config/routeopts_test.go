package config

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/access"
	"github.com/sluice-proxy/sluice/headers"
	"github.com/sluice-proxy/sluice/limit"
	"github.com/sluice-proxy/sluice/route"
)

// routeOpts is a file whose one route sets the route options below it.
const routeOpts = "listen: [{address: \"127.0.0.1:8080\"}]\nupstreams: {web: {servers: [{address: \"127.0.0.1:9001\"}]}}\nroutes:\n  - upstream: web\n    path_prefix: /api/\n"

func TestRouteOptions(t *testing.T) {
	c, err := Parse("t.yaml", []byte(routeOpts+`    strip_prefix: true
    headers:
      request:  {set: {X-Env: prod, X-Count: 5}, add: {X-Tag: [a, b], X-One: c}, remove: [X-Debug]}
      response: {set: {Strict-Transport-Security: "max-age=31536000"}, remove: [Server, X-Powered-By]}
    allow: [10.0.0.0/8, 192.0.2.7, "2001:db8::/32"]
    deny: [10.9.0.0/16]
    limits: {body: 10MiB}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routes[0]
	want := Route{
		PathPrefix: "/api/", Upstream: "web", Line: r.Line, StripPrefix: true,
		Headers: RouteHeaders{
			Request: HeaderRules{
				Set:    []HeaderField{{"X-Env", "prod"}, {"X-Count", "5"}},
				Add:    []HeaderField{{"X-Tag", "a"}, {"X-Tag", "b"}, {"X-One", "c"}},
				Remove: []string{"X-Debug"},
			},
			Response: HeaderRules{
				Set:    []HeaderField{{"Strict-Transport-Security", "max-age=31536000"}},
				Remove: []string{"Server", "X-Powered-By"},
			},
		},
		Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
			netip.MustParsePrefix("2001:db8::/32")},
		Deny:   []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")},
		Limits: RouteLimits{Body: 10 << 20},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
	phases, err := routePhases(&r)
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 4 {
		t.Fatalf("%d phases, want 4: %#v", len(phases), phases)
	}
	if _, ok := phases[0].(*access.List); !ok {
		t.Errorf("phase 0 is %T, want the access list", phases[0])
	}
	if b, ok := phases[1].(limit.Body); !ok || b.Max != 10<<20 {
		t.Errorf("phase 1 is %#v, want a 10MiB body limit", phases[1])
	}
	if p, ok := phases[2].(route.StripPrefix); !ok || p.Prefix != "/api/" {
		t.Errorf("phase 2 is %#v, want the strip of /api/", phases[2])
	}
	if h, ok := phases[3].(*headers.Phase); !ok || len(h.Request.Add) != 3 || len(h.Response.Remove) != 2 {
		t.Errorf("phase 3 is %#v, want the header rules", phases[3])
	}

	// A route that sets none has no phases.
	c, err = Parse("t.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if phases, err := routePhases(&c.Routes[0]); err != nil || len(phases) != 0 {
		t.Errorf("a plain route has phases %v, %v", phases, err)
	}
}

// TestRouteOptionProblems checks each bad route option gives one problem,
// at its line and column, saying what is wrong.
func TestRouteOptionProblems(t *testing.T) {
	tests := []struct {
		name      string
		opts      string
		line, col int
		path, msg string
	}{
		{"strip without a prefix", "    strip_prefix: true\n", 5, 19, "routes[0].strip_prefix", `needs a path_prefix other than "/"`},
		{"strip not a boolean", "    strip_prefix: yes\n", 6, 19, "routes[0].strip_prefix", "must be true or false"},
		{"framing field set", "    headers: {request: {set: {Content-Length: 5}}}\n", 6, 31, "routes[0].headers.request.set.Content-Length", "frames the body"},
		{"hop-by-hop removed", "    headers: {response: {remove: [Connection]}}\n", 6, 35, "routes[0].headers.response.remove[0]", "hop-by-hop"},
		{"Transfer-Encoding added", "    headers: {response: {add: {transfer-encoding: gzip}}}\n", 6, 32, "routes[0].headers.response.add.transfer-encoding", "frames the body"},
		{"request Host", "    headers: {request: {set: {Host: other}}}\n", 6, 31, "routes[0].headers.request.set.Host", "the request was routed by it"},
		{"name not a token", "    headers: {request: {set: {\"X Env\": prod}}}\n", 6, 31, "routes[0].headers.request.set.X Env", "not a valid field name"},
		{"value with CR LF", "    headers: {response: {set: {X-A: \"a\\r\\nSet-Cookie: x\"}}}\n", 6, 37, "routes[0].headers.response.set.X-A", "must not hold"},
		{"value with NUL", "    headers: {response: {add: {X-A: [ok, \"a\\0\"]}}}\n", 6, 42, "routes[0].headers.response.add.X-A", "must not hold"},
		{"value null", "    headers: {response: {set: {X-A: }}}\n", 6, 37, "routes[0].headers.response.set.X-A", "no value given"},
		{"set given a list", "    headers: {response: {set: {X-A: [a, b]}}}\n", 6, 37, "routes[0].headers.response.set.X-A", "must be a single value"},
		{"name twice", "    headers: {response: {set: {X-A: a, x-a: b}}}\n", 6, 40, "routes[0].headers.response.set.x-a", "given twice"},
		{"remove not a list", "    headers: {request: {remove: X-Debug}}\n", 6, 33, "routes[0].headers.request.remove", "must be a list"},
		{"unknown rule", "    headers: {request: {delete: [X-Debug]}}\n", 6, 25, "routes[0].headers.request.delete", "unknown key"},
		{"unknown direction", "    headers: {requests: {}}\n", 6, 15, "routes[0].headers.requests", `did you mean "request"?`},
		{"bad CIDR", "    allow: [10.0.0.0/33]\n", 6, 13, "routes[0].allow[0]", "not an address or an address prefix"},
		{"deny not a list", "    deny: 10.0.0.1\n", 6, 11, "routes[0].deny", "must be a list"},
		{"body decimal unit", "    limits: {body: 10MB}\n", 6, 20, "routes[0].limits.body", "ambiguous"},
		{"body negative", "    limits: {body: -1}\n", 6, 20, "routes[0].limits.body", "must be between"},
		{"unknown limit", "    limits: {bdy: 1MiB}\n", 6, 14, "routes[0].limits.bdy", `did you mean "body"?`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := strings.Replace(routeOpts, "    path_prefix: /api/\n", "", 1) + tt.opts
			if tt.name != "strip without a prefix" {
				file = routeOpts + tt.opts
			}
			_, err := Parse("t.yaml", []byte(file))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want problems", err)
			}
			if len(e.Problems) != 1 {
				t.Fatalf("got %d problems, want 1: %v", len(e.Problems), err)
			}
			p := e.Problems[0]
			if p.Line != tt.line || p.Column != tt.col || p.Path != tt.path || !strings.Contains(p.Msg, tt.msg) {
				t.Errorf("got %d:%d %s: %s\nwant %d:%d %s: ...%s...", p.Line, p.Column, p.Path, p.Msg, tt.line, tt.col, tt.path, tt.msg)
			}
		})
	}
}
