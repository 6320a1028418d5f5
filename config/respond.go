package config

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-proxy/sluice/route"
	"github.com/sluice-proxy/sluice/static"
)

// This file holds respond, a route's own answer, and the reading of the
// files that answers' bodies come from.

// routeRespond walks a route's "respond" mapping. Its location is checked
// against the route's path_regex by checkRespond, once the route is
// walked.
func (d *decoder) routeRespond(n *yaml.Node, path string) *Respond {
	rs := &Respond{Line: n.Line}
	var bodyNode, fileNode *yaml.Node
	d.mapping(n, path, []field{
		{"status", d.integer(&rs.Status, between(200, 599))},
		{"location", d.str(&rs.Location, checkNotEmpty)},
		{"headers", func(n *yaml.Node, path string) { rs.Headers = d.headerFields(n, path, false, true) }},
		{"body", func(n *yaml.Node, path string) {
			bodyNode = n
			d.str(&rs.Body, nil)(n, path)
		}},
		{"body_file", func(n *yaml.Node, path string) {
			fileNode = n
			if d.str(&rs.BodyFile, checkNotEmpty)(n, path); rs.BodyFile != "" {
				rs.BodyFile, rs.body = d.readBodyFile(n, path, rs.BodyFile)
			}
		}},
	})
	if bodyNode != nil && fileNode != nil {
		d.addf(fileNode, join(path, "body_file"), "the body is given twice, as body and body_file; keep one")
	}
	if bodyNode != nil {
		rs.body = []byte(rs.Body)
	}
	if rs.Status == 0 {
		rs.Status = 200
		if rs.Location != "" {
			rs.Status = 302 // nginx's return URL
		}
	}
	return rs
}

// checkRespond checks a route's respond (at n) once the route is walked,
// with the route's path_regex for its location's captures.
func (d *decoder) checkRespond(n *yaml.Node, path string, r *Route) {
	rs := r.Respond
	if n == nil || rs == nil {
		return
	}
	switch {
	case r.StripPrefix:
		d.addf(n, path, "sends nothing upstream, so strip_prefix has no path to strip")
		return
	case r.Rewrite != nil:
		d.addf(n, path, "sends nothing upstream, so rewrite has no path to rewrite (a redirect's location takes path_regex's captures)")
		return
	}
	if rs.Location != "" {
		if _, err := route.ParseTemplate(rs.Location, r.pathRegex); err != nil {
			d.addf(childValue(n, "location"), join(path, "location"), "%v", err)
			return
		}
	}
	if _, err := respondPhase(rs, r.pathRegex); err != nil {
		d.addf(n, path, "%s", trimPhase(err.Error(), "respond: "))
	}
}

// childValue returns the value of key in the mapping n, or n itself when
// it has none.
func childValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return resolve(n.Content[i+1])
			}
		}
	}
	return n
}

// respondPhase makes the phase answering as rs says.
func respondPhase(rs *Respond, re *regexp.Regexp) (*route.Respond, error) {
	a := route.Answer{Status: rs.Status, Body: rs.body, Location: rs.Location, Regexp: re}
	for _, f := range rs.Headers {
		a.Header.Add(f.Name, f.Value)
	}
	if rs.BodyFile != "" && !a.Header.Has("Content-Type") {
		a.Header.Add("Content-Type", static.ContentType(rs.BodyFile))
	}
	return route.NewRespond(a)
}

// readBodyFile reads a file whose contents are an answer's body: name,
// relative to the config file's directory, which it returns resolved. A
// file that cannot be read, or is over maxFileBody, is a problem at n.
func (d *decoder) readBodyFile(n *yaml.Node, path, name string) (string, []byte) {
	if !filepath.IsAbs(name) {
		name = filepath.Join(filepath.Dir(d.file), name)
	}
	f, err := os.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			d.addf(n, path, "file %s does not exist (a relative path is relative to the config file's directory)", name)
		} else {
			d.addf(n, path, "%v", err)
		}
		return name, nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		d.addf(n, path, "%s is not a regular file", name)
		return name, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBody+1))
	switch {
	case err != nil:
		d.addf(n, path, "reading %s: %v", name, err)
		return name, nil
	case len(b) > maxFileBody:
		d.addf(n, path, "%s is over %s; an answer's body is held in memory", name, formatSize(maxFileBody))
		return name, nil
	}
	return name, b
}

// trimPhase removes a phase's name from the front of its error, which the
// key path already says.
func trimPhase(msg, prefix string) string {
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):]
	}
	return msg
}
