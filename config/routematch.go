package config

import (
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file holds how a route matches paths (path_prefix, path,
// path_regex) and the check that every route can be matched.

// checkPath validates a route's exact path: as a path prefix.
func checkPath(s string) (string, string) {
	v, msg := checkPathPrefix(s)
	return v, strings.Replace(msg, "a path prefix is matched against the path only", "a path is matched against the path without its query", 1)
}

// routePathRegex parses path_regex: a regular expression Go compiles.
func (d *decoder) routePathRegex(n *yaml.Node, path string, r *Route) {
	var s string
	if d.str(&s, checkNotEmpty)(n, path); s == "" {
		return
	}
	re, err := regexp.Compile(s)
	if err != nil {
		d.addf(n, path, "not a valid regular expression (Go's RE2 syntax): %v", err)
		return
	}
	r.PathRegex, r.pathRegex = s, re
}

// routePathKeys reports a route with more than one path condition.
func (d *decoder) routePathKeys(n *yaml.Node, path string, present map[string]bool) {
	var given []string
	for _, k := range []string{"path_prefix", "path", "path_regex"} {
		if present[k] {
			given = append(given, k)
		}
	}
	if len(given) > 1 {
		d.addf(n, join(path, given[1]), "a route matches its path by one of path_prefix, path or path_regex; this one gives %s", strings.Join(given, " and "))
	}
}

// checkShadowed warns of each route that an earlier route leaves no
// request to: the earlier one matches every request it would, and the
// first match wins. A warning, not a problem: such a file loaded before
// routes were checked, and it still means what it meant. Only what can be known for sure is reported: a regular expression
// is compared with another by its text, and with an exact path by matching
// it.
func (d *decoder) checkShadowed(routes []Route, nodes []located) {
	if len(routes) != len(nodes) {
		return // a route did not parse: reported already
	}
	for i := range routes {
		for j := 0; j < i; j++ {
			if covers(&routes[j], &routes[i]) {
				d.warnf(nodes[i].n, nodes[i].path, "is never matched: the route at line %d (%s) comes first and matches every request this one would; routes are tried in the order of the file, so put the more specific one first",
					routes[j].Line, describeMatch(&routes[j]))
				break
			}
		}
	}
}

// covers reports whether every request that b matches is matched by a.
func covers(a, b *Route) bool {
	return hostCovers(a.Host, b.Host) && pathCovers(a, b)
}

// hostCovers reports whether host pattern a matches every host pattern b
// does (both lower case, as Parse stores them).
func hostCovers(a, b string) bool {
	switch {
	case a == "" || a == b:
		return true
	case b == "":
		return false
	}
	suffix, wild := strings.CutPrefix(a, "*")
	if !wild {
		return false
	}
	// "*.example.com" takes a.example.com, and *.a.example.com too.
	return strings.HasSuffix(strings.TrimPrefix(b, "*"), suffix) && len(strings.TrimPrefix(b, "*")) > len(suffix)
}

// pathCovers reports whether a's path condition takes every path b's does.
func pathCovers(a, b *Route) bool {
	switch {
	case a.PathPrefix == "" && a.Path == "" && a.PathRegex == "":
		return true
	case a.PathPrefix != "":
		return (b.PathPrefix != "" && strings.HasPrefix(b.PathPrefix, a.PathPrefix)) ||
			(b.Path != "" && strings.HasPrefix(b.Path, a.PathPrefix))
	case a.Path != "":
		return b.Path == a.Path
	case a.pathRegex != nil:
		return b.PathRegex == a.PathRegex || (b.Path != "" && a.pathRegex.MatchString(b.Path))
	}
	return false
}

// describeMatch says what a route matches, for messages.
func describeMatch(r *Route) string {
	var parts []string
	if r.Host != "" {
		parts = append(parts, "host "+r.Host)
	}
	switch {
	case r.PathPrefix != "":
		parts = append(parts, "path_prefix "+r.PathPrefix)
	case r.Path != "":
		parts = append(parts, "path "+r.Path)
	case r.PathRegex != "":
		parts = append(parts, "path_regex "+r.PathRegex)
	}
	if len(parts) == 0 {
		return "every request"
	}
	return strings.Join(parts, ", ")
}
