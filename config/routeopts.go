package config

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-proxy/sluice/access"
	"github.com/sluice-proxy/sluice/headers"
	"github.com/sluice-proxy/sluice/limit"
	"github.com/sluice-proxy/sluice/route"
)

// This file holds a route's own handling of its requests: strip_prefix,
// headers, allow and deny, limits. Each is parsed here and built into a
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
