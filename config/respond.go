package config

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-proxy/sluice/errpage"
	"github.com/sluice-proxy/sluice/route"
	"github.com/sluice-proxy/sluice/static"
)

// This file holds respond, a route's own answer, the error pages of
// sluice's answers, and the reading of the files their bodies come from.

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

// errorPages walks an "errors" mapping of statuses to files, reading each
// file.
func (d *decoder) errorPages(n *yaml.Node, path string) []ErrorPage {
	pages := []ErrorPage{}
	if isNull(n) {
		return pages
	}
	if n.Kind != yaml.MappingNode {
		d.addf(n, path, "must be a mapping of statuses to files, such as {502: errors/502.html}")
		return pages
	}
	seen := map[int]*yaml.Node{}
	for _, p := range d.pairs(n, path, nil) {
		fpath := join(path, p.key.Value)
		var status int
		d.integer(&status, between(400, 599))(p.key, fpath)
		if status == 0 {
			continue
		}
		if first, dup := seen[status]; dup {
			d.addf(p.key, fpath, "%d is given twice (first at line %d)", status, first.Line)
			continue
		}
		seen[status] = p.key
		pg := ErrorPage{Status: status}
		if d.str(&pg.File, checkNotEmpty)(p.value, fpath); pg.File == "" {
			continue
		}
		if pg.File, pg.body = d.readBodyFile(p.value, fpath, pg.File); pg.body != nil {
			pages = append(pages, pg)
		}
	}
	slices.SortFunc(pages, func(a, b ErrorPage) int { return a.Status - b.Status })
	return pages
}

// errorPagesPhase makes the pages of a route: its own, over the
// top-level ones; nil when there are none.
func errorPagesPhase(own, top []ErrorPage) (*errpage.Pages, error) {
	if len(own) == 0 && len(top) == 0 {
		return nil, nil
	}
	m := map[int]errpage.Page{}
	for _, list := range [][]ErrorPage{top, own} {
		for _, p := range list {
			m[p.Status] = errpage.Page{Body: p.body, ContentType: static.ContentType(p.File)}
		}
	}
	return errpage.New(m)
}
