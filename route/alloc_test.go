//go:build !race

package route

import (
	"regexp"
	"testing"
)

// TestMatchAllocations checks that matching a request to a route, by any
// kind of path condition, allocates nothing. (The race detector allocates
// on its own, hence the build constraint; .ci/run runs this without it.)
func TestMatchAllocations(t *testing.T) {
	tbl := New(
		Route{Host: "api.example.com", PathPrefix: "/v1/"},
		Route{Path: "/healthz"},
		Route{PathRegex: regexp.MustCompile(`^/api/v[0-9]+/`)},
		Route{Host: "*.example.com"},
		Route{},
	)
	host := []byte("www.example.com:8443")
	for _, path := range []string{"/healthz", "/api/v2/users", "/other"} {
		p := []byte(path)
		if n := testing.AllocsPerRun(100, func() { tbl.Match(host, p) }); n != 0 {
			t.Errorf("Match(%s): %.0f allocations, want 0", path, n)
		}
	}
}
