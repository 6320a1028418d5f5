package config

import (
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-proxy/sluice/access"
	"github.com/sluice-proxy/sluice/headers"
	"github.com/sluice-proxy/sluice/limit"
	"github.com/sluice-proxy/sluice/route"
)

// This file holds a route's own handling of its requests: strip_prefix,
// rewrite, headers, allow and deny, limits. Each is parsed here and built into a
// route phase by routePhases.

// routeStripPrefix returns the parser of strip_prefix, which keeps its
// node for checkStripPrefix.
func (d *decoder) routeStripPrefix(r *Route, node **yaml.Node) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		*node = n
		d.boolean(&r.StripPrefix)(n, path)
	}
}

// checkStripPrefix reports strip_prefix on a route with nothing to strip.
func (d *decoder) checkStripPrefix(n *yaml.Node, path string, r *Route) {
	switch {
	case n == nil || !r.StripPrefix:
	case r.PathPrefix == "" || r.PathPrefix == "/":
		d.addf(n, path, "needs a path_prefix other than \"/\" to strip")
	case r.Static != nil:
		d.addf(n, path, "changes the path sent upstream; a static route sends none (its files are found after path_prefix already)")
	}
}

// routeRewrite walks a route's "rewrite": a mapping, or the replacement
// alone. The replacement is checked against its expression, which may be
// the route's path_regex, by checkRewrite once the route is walked.
func (d *decoder) routeRewrite(n *yaml.Node, path string) *Rewrite {
	rw := &Rewrite{Line: n.Line}
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		d.str(&rw.Replacement, checkNotEmpty)(n, path)
		return rw
	}
	var regexNode *yaml.Node
	present := d.mapping(n, path, []field{
		{"regex", func(n *yaml.Node, path string) {
			regexNode = n
			d.str(&rw.Regex, checkNotEmpty)(n, path)
		}},
		{"replacement", d.str(&rw.Replacement, checkNotEmpty)},
	})
	if n.Kind == yaml.MappingNode {
		d.required(n, path, present, "replacement")
	}
	if rw.Regex != "" {
		re, err := regexp.Compile(rw.Regex)
		if err != nil {
			d.addf(regexNode, join(path, "regex"), "not a valid regular expression (Go's RE2 syntax): %v", err)
			rw.Replacement = "" // nothing more to check
			return rw
		}
		rw.re = re
	}
	return rw
}

// checkRewrite checks a route's rewrite once the route is walked: its
// expression (its own, or the route's path_regex), its replacement, and
// that the route sends a path upstream that strip_prefix does not change.
func (d *decoder) checkRewrite(n *yaml.Node, path string, r *Route) {
	rw := r.Rewrite
	if n == nil || rw == nil || rw.Replacement == "" {
		return
	}
	switch {
	case r.Static != nil:
		d.addf(n, path, "changes the path sent upstream; a static route sends none")
		return
	case r.Respond != nil:
		return // reported by checkRespond
	case r.StripPrefix:
		d.addf(n, path, "and strip_prefix both change the path sent upstream; use one (a rewrite can strip: regex ^/api/(.*)$, replacement /$1)")
		return
	}
	if rw.re == nil && rw.Regex == "" {
		if r.pathRegex == nil {
			if n.Kind == yaml.ScalarNode {
				d.addf(n, path, "the replacement alone takes its captures from the route's path_regex, and this route has none; write {regex: ..., replacement: %s}", rw.Replacement)
			} else {
				d.addf(n, join(path, "regex"), "missing; it is required unless the route has a path_regex")
			}
			return
		}
		rw.re = r.pathRegex
	}
	if _, err := route.NewRewrite(rw.re, rw.Replacement); err != nil {
		at := n
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "replacement" {
					at = resolve(n.Content[i+1])
				}
			}
		}
		d.addf(at, path, "%s", strings.TrimPrefix(err.Error(), "rewrite: "))
	}
}

// routeHeaders walks a route's "headers" mapping.
func (d *decoder) routeHeaders(n *yaml.Node, path string, h *RouteHeaders) {
	d.mapping(n, path, []field{
		{"request", func(n *yaml.Node, path string) { d.headerRules(n, path, true, &h.Request) }},
		{"response", func(n *yaml.Node, path string) { d.headerRules(n, path, false, &h.Response) }},
	})
}

// headerRules walks the set, add and remove of one direction's rules.
func (d *decoder) headerRules(n *yaml.Node, path string, request bool, r *HeaderRules) {
	d.mapping(n, path, []field{
		{"set", func(n *yaml.Node, path string) { r.Set = d.headerFields(n, path, request, false) }},
		{"add", func(n *yaml.Node, path string) { r.Add = d.headerFields(n, path, request, true) }},
		{"remove", func(n *yaml.Node, path string) {
			if n.Kind == yaml.ScalarNode && !isNull(n) {
				d.addf(n, path, "must be a list of field names, such as [%s]", n.Value)
				return
			}
			names := []string{}
			d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				if name, ok := d.headerName(n, path, request); ok {
					names = append(names, name)
				}
			})
			r.Remove = names
		}},
	})
}

// headerFields walks a mapping of field names to values; with list, a
// value may also be a list of values, each a field of its own. Names given
// twice, in any case, are reported.
func (d *decoder) headerFields(n *yaml.Node, path string, request, list bool) []HeaderField {
	fields := []HeaderField{}
	if isNull(n) {
		return fields
	}
	if n.Kind != yaml.MappingNode {
		d.addf(n, path, "must be a mapping of field names to values, such as {X-Frame-Options: DENY}")
		return fields
	}
	seen := map[string]*yaml.Node{}
	for _, p := range d.pairs(n, path, nil) {
		fpath := join(path, p.key.Value)
		name, ok := d.headerName(p.key, fpath, request)
		if !ok {
			continue
		}
		if first, dup := seen[strings.ToLower(name)]; dup {
			d.addf(p.key, fpath, "%s is given twice (first at line %d); field names ignore case", name, first.Line)
			continue
		}
		seen[strings.ToLower(name)] = p.key
		values := []*yaml.Node{p.value}
		if list && p.value.Kind == yaml.SequenceNode {
			values = values[:0]
			for _, v := range p.value.Content {
				values = append(values, resolve(v))
			}
		}
		for _, v := range values {
			if value, ok := d.headerValue(v, fpath); ok {
				fields = append(fields, HeaderField{Name: name, Value: value})
			}
		}
	}
	return fields
}

// headerName checks a field name a rule names.
func (d *decoder) headerName(n *yaml.Node, path string, request bool) (string, bool) {
	var name string
	if !d.scalarString(&name, n, path) {
		return "", false
	}
	if msg := headers.CheckName(name, request); msg != "" {
		d.addf(n, path, "%s: %s", name, msg)
		return "", false
	}
	return name, true
}

// headerValue checks a field value: a string, or a number or boolean,
// taken as written.
func (d *decoder) headerValue(n *yaml.Node, path string) (string, bool) {
	var v string
	if !d.scalarString(&v, n, path) {
		return "", false
	}
	if msg := headers.CheckValue(v); msg != "" {
		d.addf(n, path, "%s", msg)
		return "", false
	}
	return v, true
}

// routeLimits walks a route's "limits" mapping.
func (d *decoder) routeLimits(n *yaml.Node, path string, l *RouteLimits) {
	d.mapping(n, path, []field{
		{"body", d.size(&l.Body, 0, 1<<40)},
	})
}

// routePhases builds the phases of a route's own handling, in the order
// they act: the allow and deny lists first (a client refused is refused
// whatever else), then the body limit, the path, the header rules.
func routePhases(r *Route) ([]any, error) {
	var phases []any
	if len(r.Allow) > 0 || len(r.Deny) > 0 {
		phases = append(phases, &access.List{Allow: r.Allow, Deny: r.Deny})
	}
	if r.Limits.Body > 0 {
		phases = append(phases, limit.Body{Max: r.Limits.Body})
	}
	if r.StripPrefix {
		phases = append(phases, route.StripPrefix{Prefix: r.PathPrefix})
	}
	if rw := r.Rewrite; rw != nil {
		p, err := route.NewRewrite(rw.re, rw.Replacement)
		if err != nil {
			return nil, err
		}
		phases = append(phases, p)
	}
	req, resp := headerRules(&r.Headers.Request), headerRules(&r.Headers.Response)
	if !req.Empty() || !resp.Empty() {
		p, err := headers.New(req, resp)
		if err != nil {
			return nil, err
		}
		phases = append(phases, p)
	}
	return phases, nil
}

func headerRules(r *HeaderRules) headers.Rules {
	var h headers.Rules
	h.Remove = r.Remove
	for _, f := range r.Set {
		h.Set = append(h.Set, headers.Field{Name: f.Name, Value: f.Value})
	}
	for _, f := range r.Add {
		h.Add = append(h.Add, headers.Field{Name: f.Name, Value: f.Value})
	}
	return h
}
