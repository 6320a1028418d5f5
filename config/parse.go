package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/compress"
	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/retry"
)

// Load reads the file at path and parses it with Parse, using path as
// the file name in messages. If the file cannot be read, Load returns
// the error from os.ReadFile; otherwise it returns what Parse returns.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse parses and validates a sluice config file held in data; name is
// used in messages and stored in Config.File. Keys not given get their
// documented defaults.
//
// The file must hold a single YAML document. Anchors, aliases and merge
// keys ("<<") are allowed. A key given with no value (null) is an error,
// except for a section such as "timeouts:", which then keeps its
// defaults.
//
// If anything is wrong, Parse returns a nil *Config and an *Error that
// lists every problem found.
func Parse(name string, data []byte) (*Config, error) {
	d := &decoder{file: name}
	return d.parse(data)
}

// maxProblems caps the problems listed for one file, so that a
// pathological file gives a report of bounded size.
const maxProblems = 100

// A decoder walks the yaml.Node tree of one file, filling a Config and
// collecting problems. Walking the nodes ourselves, rather than
// decoding into structs, gives every problem its line and column, lets
// one pass report all of them, and catches duplicate keys, which
// yaml.Node decoding does not.
type decoder struct {
	file     string
	problems []Problem
	// schema, when not nil, records the path of every key the schema
	// knows of in each mapping walked, with sequence indexes written
	// as "[]" and upstream and store names as "*". Tests use it to check that
	// testdata/full.yaml uses every key.
	schema map[string]bool
	// upstream is the key path of the upstream being walked, and store of
	// the cache store, for schemaKey.
	upstream, store string
	// truncated is set when a problem was dropped for maxProblems.
	truncated bool
	// warnings are what is allowed but most likely a mistake.
	warnings []Problem
}

// warnf records a warning at n: something the file may say, but most
// likely did not mean (see Config.Warnings).
func (d *decoder) warnf(n *yaml.Node, path, format string, args ...any) {
	if len(d.warnings) >= maxProblems {
		return
	}
	p := Problem{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.warnings = append(d.warnings, p)
}

// addf records a problem at n.
func (d *decoder) addf(n *yaml.Node, path, format string, args ...any) {
	if d.full() {
		d.truncated = true
		return
	}
	p := Problem{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.problems = append(d.problems, p)
}

// full reports whether the decoder has collected all the problems it
// will list.
func (d *decoder) full() bool { return len(d.problems) >= maxProblems }

// stop reports whether a walk should stop early because the decoder is
// full, and if so notes that the report is truncated.
func (d *decoder) stop() bool {
	if d.full() {
		d.truncated = true
	}
	return d.truncated
}

// yamlErrorLine matches the position prefix of yaml's syntax errors.
// yaml.v3 reports them as plain strings, so the line number can only be
// had from the text.
var yamlErrorLine = regexp.MustCompile(`^yaml: line (\d+): `)

// syntaxProblem turns an error from the YAML parser, reading data, into a
// problem at the line the parser points at (problemLine).
func (d *decoder) syntaxProblem(data []byte, err error) {
	msg := err.Error()
	line := 0
	if m := yamlErrorLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
		line = problemLine(data, err, line)
		if strings.HasPrefix(msg, "did not find expected key") || strings.HasPrefix(msg, "did not find expected '-'") {
			// A token where the block it is in has no place for it.
			msg += " (check this line's indentation)"
		}
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	d.problems = append(d.problems, Problem{File: d.file, Line: line, Msg: "invalid YAML: " + msg})
}

// problemLine returns the line of data at which the YAML parser fails
// with err. The line err names (from) is often that of the block the
// parser was in rather than that of the token it could not take (and
// counted from 0): for a key indented wrong on line 12 of a mapping that
// begins on line 8, yaml.v3 says line 7, and keeps the offending token's
// position to itself. The line is found as the shortest run of whole
// lines from the start, ending no earlier than the line before from, that
// fails the same way: a binary search over the line count, since a prefix
// that ends before the offending token parses or fails otherwise, and one
// that holds it fails as the whole file does.
func problemLine(data []byte, err error, from int) int {
	ends := []int{} // the offset just past each line
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	if from < 1 || from > len(ends) {
		return from
	}
	from = max(from-1, 1)
	want := err.Error()
	failsSo := func(lines int) bool {
		dec := yaml.NewDecoder(bytes.NewReader(data[:ends[lines-1]]))
		for {
			var n yaml.Node
			err := dec.Decode(&n)
			if err == nil {
				continue
			}
			return err.Error() == want
		}
	}
	lo, hi := from, len(ends) // failsSo(hi) holds: it is the whole file
	for lo < hi {
		mid := lo + (hi-lo)/2
		if failsSo(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func (d *decoder) parse(data []byte) (*Config, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		// No document at all: empty, or only comments.
	case err != nil:
		d.syntaxProblem(data, err)
		return nil, d.err()
	default:
		var next yaml.Node
		switch err := dec.Decode(&next); {
		case errors.Is(err, io.EOF):
		case err != nil:
			d.syntaxProblem(data, err)
		default:
			d.addf(&next, "", "a config file holds one YAML document; found another one here")
		}
	}

	c := defaults()
	c.File = d.file
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	root = resolve(root)
	if root.Kind == 0 || root.Kind == yaml.DocumentNode || isNull(root) {
		d.problems = append(d.problems, Problem{File: d.file,
			Msg: "the file is empty; a config needs at least listen, routes and upstreams"})
		return nil, d.err()
	}
	d.root(root, c)
	if err := d.err(); err != nil {
		return nil, err
	}
	c.warnings = d.warnings
	return c, nil
}

// err returns the problems collected as an *Error, sorted by position,
// or nil if there are none.
func (d *decoder) err() error {
	if len(d.problems) == 0 {
		return nil
	}
	slices.SortStableFunc(d.problems, func(a, b Problem) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
	if d.truncated {
		d.problems = append(d.problems, Problem{File: d.file,
			Msg: fmt.Sprintf("too many problems; stopped after %d", maxProblems)})
	}
	return &Error{Problems: d.problems}
}

// join appends key to the key path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// index appends a sequence index to the key path.
func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// resolve follows aliases to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is a YAML null: "~", "null" or nothing.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// isList reports whether n is a sequence or null, which stands for an
// empty sequence.
func isList(n *yaml.Node) bool {
	return n.Kind == yaml.SequenceNode || isNull(n)
}

// A field is one key the schema knows in a mapping, with the function
// that parses its value. path is the value's key path.
type field struct {
	key   string
	parse func(n *yaml.Node, path string)
}

// A pair is one key and value of a mapping, aliases resolved.
type pair struct {
	key, value *yaml.Node
}

// pairs returns the key-value pairs of the mapping n in file order,
// expanding merge keys ("<<"): a merged key is added only if the
// mapping does not set it itself, and an earlier merged mapping wins
// over a later one. It reports duplicate and non-scalar keys.
func (d *decoder) pairs(n *yaml.Node, path string, merging map[*yaml.Node]bool) []pair {
	var own, merged []pair
	var merges []*yaml.Node
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			d.addf(k, path, "a key must be a plain string")
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if f, dup := first[k.Value]; dup {
			d.addf(k, join(path, k.Value), "duplicate key (first given at line %d)", f.Line)
			continue
		}
		first[k.Value] = k
		own = append(own, pair{k, v})
	}
	if len(merges) == 0 {
		return own
	}
	if merging == nil {
		merging = map[*yaml.Node]bool{}
	}
	merging[n] = true
	for _, m := range merges {
		srcs := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			srcs = srcs[:0]
			for _, s := range m.Content {
				srcs = append(srcs, resolve(s))
			}
		}
		for _, s := range srcs {
			if s.Kind != yaml.MappingNode {
				d.addf(s, path, "a merge key (<<) must refer to a mapping or a list of mappings")
				continue
			}
			if merging[s] {
				continue // merged already, or a mapping merging itself
			}
			for _, p := range d.pairs(s, path, merging) {
				if _, set := first[p.key.Value]; !set {
					first[p.key.Value] = p.key
					merged = append(merged, p)
				}
			}
		}
	}
	return append(own, merged...)
}

// mapping walks the mapping n: it calls the parse function of each
// field given, and reports keys not in fields, suggesting the closest
// known one. A null n stands for an empty mapping. It returns the keys
// present, so the caller can check for required ones; a key reported
// as a likely typo of a known one counts as present.
func (d *decoder) mapping(n *yaml.Node, path string, fields []field) map[string]bool {
	if d.schema != nil {
		for _, f := range fields {
			d.schema[d.schemaKey(join(path, f.key))] = true
		}
	}
	present := map[string]bool{}
	if isNull(n) {
		return present
	}
	if n.Kind != yaml.MappingNode {
		d.addf(n, path, "must be a mapping of keys to values, not %s", describe(n))
		return present
	}
	for _, p := range d.pairs(n, path, nil) {
		if d.stop() {
			break
		}
		key := p.key.Value
		i := slices.IndexFunc(fields, func(f field) bool { return f.key == key })
		if i < 0 {
			known := make([]string, len(fields))
			for j, f := range fields {
				known[j] = f.key
			}
			hint := suggest(key, known)
			d.addf(p.key, join(path, key), "unknown key%s", hint)
			if hint != "" {
				// Most likely a typo of a required key: do not also
				// report that key missing.
				present[suggestion(key, known)] = true
			}
			continue
		}
		present[key] = true
		fields[i].parse(p.value, join(path, key))
	}
	return present
}

// required reports each key in keys that is not in present, at the
// mapping n that lacks it.
func (d *decoder) required(n *yaml.Node, path string, present map[string]bool, keys ...string) {
	for _, k := range keys {
		if !present[k] {
			d.addf(n, join(path, k), "missing; it is required")
		}
	}
}

// sequence walks the sequence n, calling item for each element. A null
// n stands for an empty sequence. It returns the number of elements.
func (d *decoder) sequence(n *yaml.Node, path string, item func(i int, n *yaml.Node, path string)) int {
	if isNull(n) {
		return 0
	}
	if n.Kind != yaml.SequenceNode {
		d.addf(n, path, "must be a list, not %s", describe(n))
		return 0
	}
	for i, e := range n.Content {
		if d.stop() {
			break
		}
		item(i, resolve(e), index(path, i))
	}
	return len(n.Content)
}

// schemaKey rewrites a key path for decoder.schema: "listen[0].address"
// becomes "listen[].address" and "upstreams.api.pool" "upstreams.*.pool".
func (d *decoder) schemaKey(path string) string {
	if u := d.upstream; u != "" && strings.HasPrefix(path, u+".") {
		path = "upstreams.*" + path[len(u):]
	}
	if st := d.store; st != "" && strings.HasPrefix(path, st+".") {
		path = "cache.stores.*" + path[len(st):]
	}
	return sequenceIndex.ReplaceAllString(path, "[]")
}

var sequenceIndex = regexp.MustCompile(`\[\d+\]`)

// root walks the top-level mapping into c.
func (d *decoder) root(n *yaml.Node, c *Config) {
	if n.Kind != yaml.MappingNode {
		d.addf(n, "", "the file must hold a mapping with listen, routes and upstreams, not %s", describe(n))
		return
	}
	var (
		routeUpstreams []located // each route's upstream value
		listenAddrs    []located // each listen address
		metricsAddr    *yaml.Node
		adminAddr      *yaml.Node
		clientIPNode   *yaml.Node // forwarded.client_ip: x_forwarded_for
		routeNodes     []located  // each route, as c.Routes
	)
	present := d.mapping(n, "", []field{
		{"listen", func(n *yaml.Node, path string) {
			count := d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				l := Listener{Line: n.Line}
				var redirectNode, portNode, protocolsNode, modeNode, earlyNode *yaml.Node
				present := d.mapping(n, path, []field{
					{"address", func(n *yaml.Node, path string) {
						if d.address(&l.Address, n, path, true) {
							listenAddrs = append(listenAddrs, located{n, path})
						}
					}},
					{"tls", func(n *yaml.Node, path string) { l.TLS = d.listenerTLS(n, path) }},
					{"redirect_https", func(n *yaml.Node, path string) {
						redirectNode = n
						d.boolean(&l.RedirectHTTPS)(n, path)
					}},
					{"https_port", func(n *yaml.Node, path string) {
						portNode = n
						d.integer(&l.HTTPSPort, between(1, 65535))(n, path)
					}},
					{"protocols", func(n *yaml.Node, path string) {
						protocolsNode = n
						d.protocols(&l.Protocols)(n, path)
					}},
					{"mode", func(n *yaml.Node, path string) {
						modeNode = n
						d.fileMode(&l.Mode)(n, path)
					}},
					{"early_data", func(n *yaml.Node, path string) {
						earlyNode = n
						d.enum(&l.EarlyData, "off", "safe")(n, path)
					}},
				})
				d.required(n, path, present, "address")
				l.Mode = d.unixMode(l.Address, l.Mode, modeNode, path)
				if _, unix := sock.UnixPath(l.Address); unix && l.TLS != nil && l.TLS.ACME != nil {
					d.addf(n, join(path, "tls.acme"), "needs a TCP listener: the CA connects to port 443 (or 80), not to a Unix socket; give the certificates as files here, or have the proxy in front get them")
				}
				if l.RedirectHTTPS && l.TLS != nil {
					d.addf(redirectNode, join(path, "redirect_https"), "is for a plain listener; this one has tls")
				}
				if protocolsNode != nil {
					d.checkProtocols(protocolsNode, join(path, "protocols"), &l)
				}
				if earlyNode != nil && l.EarlyData == "safe" && !slices.Contains(l.Protocols, "h3") {
					d.addf(earlyNode, join(path, "early_data"), "is HTTP/3's 0-RTT: list h3 in protocols")
				}
				if portNode != nil && !l.RedirectHTTPS {
					d.addf(portNode, join(path, "https_port"), "only used with redirect_https: true")
				}
				c.Listen = append(c.Listen, l)
			})
			if count == 0 && isList(n) {
				d.addf(n, path, "at least one listener is required, such as [{address: 127.0.0.1:8080}]")
			}
		}},
		{"timeouts", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"header", d.duration(&c.Timeouts.Header, true)},
				{"idle", d.duration(&c.Timeouts.Idle, true)},
				{"drain", d.duration(&c.Timeouts.Drain, false)},
				{"body", d.duration(&c.Timeouts.Body, true)},
				{"send", d.duration(&c.Timeouts.Send, true)},
				{"stream_idle", d.duration(&c.Timeouts.StreamIdle, true)},
			})
		}},
		{"limits", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"max_header_bytes", d.size(&c.Limits.MaxHeaderBytes, 1<<10, 1<<20)},
				{"max_headers", d.integer(&c.Limits.MaxHeaders, between(1, 10000))},
				{"max_idle_upstream_conns", d.integer(&c.Limits.MaxIdleUpstreamConns, atLeast(0))},
				{"h2", func(n *yaml.Node, path string) {
					d.mapping(n, path, []field{
						{"max_concurrent_streams", d.integer(&c.Limits.H2.MaxConcurrentStreams, between(1, 10000))},
						{"initial_window", d.size(&c.Limits.H2.InitialWindow, 64<<10, 16<<20)},
						{"max_header_list", d.size(&c.Limits.H2.MaxHeaderList, 1<<10, 1<<20)},
					})
				}},
				{"h3", func(n *yaml.Node, path string) {
					d.mapping(n, path, []field{
						{"max_concurrent_streams", d.integer(&c.Limits.H3.MaxConcurrentStreams, between(1, 10000))},
						{"max_header_list", d.size(&c.Limits.H3.MaxHeaderList, 1<<10, 1<<20)},
						{"idle_timeout", d.duration(&c.Limits.H3.IdleTimeout, true)},
						{"retry_above", d.integer(&c.Limits.H3.RetryAbove, between(0, 1000000))},
						{"rapid_reset_streams", d.integer(&c.Limits.H3.RapidResetStreams, between(1, 1000000))},
						{"rapid_reset_percent", d.integer(&c.Limits.H3.RapidResetPercent, between(1, 100))},
					})
				}},
			})
		}},
		{"access_log", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"enabled", d.boolean(&c.AccessLog.Enabled)},
				{"format", d.accessFormat(&c.AccessLog)},
				{"path", d.str(&c.AccessLog.Path, nil)},
				{"buffer", d.size(&c.AccessLog.Buffer, 0, 16<<20)},
				{"flush", d.duration(&c.AccessLog.Flush, true)},
			})
		}},
		{"log", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"level", d.enum(&c.Log.Level, "debug", "info", "warn", "error")},
				{"format", d.enum(&c.Log.Format, "text", "json")},
			})
		}},
		{"forwarded", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"x_forwarded_for", d.boolean(&c.Forwarded.XForwardedFor)},
				{"x_forwarded_proto", d.boolean(&c.Forwarded.XForwardedProto)},
				{"x_forwarded_host", d.boolean(&c.Forwarded.XForwardedHost)},
				{"via", d.boolean(&c.Forwarded.Via)},
				{"request_id", d.boolean(&c.Forwarded.RequestID)},
				{"trusted", d.trusted(&c.Forwarded)},
				{"client_ip", func(n *yaml.Node, path string) {
					if d.enum(&c.Forwarded.ClientIP, "peer", "x_forwarded_for")(n, path); c.Forwarded.ClientIP == "x_forwarded_for" {
						clientIPNode = n
					}
				}},
			})
		}},
		{"metrics", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"address", func(n *yaml.Node, path string) {
					if d.str(&c.Metrics.Address, nil)(n, path); c.Metrics.Address != "" {
						if d.address(&c.Metrics.Address, n, path, true) {
							metricsAddr = n
						}
					}
				}},
			})
		}},
		{"pid_file", d.str(&c.PIDFile, checkNotEmpty)},
		{"admin", func(n *yaml.Node, path string) {
			var modeNode *yaml.Node
			d.mapping(n, path, []field{
				{"address", func(n *yaml.Node, path string) {
					if d.str(&c.Admin.Address, nil)(n, path); c.Admin.Address != "" {
						if d.address(&c.Admin.Address, n, path, true) {
							adminAddr = n
						}
					}
				}},
				{"pprof", d.boolean(&c.Admin.Pprof)},
				{"token_file", d.str(&c.Admin.TokenFile, checkNotEmpty)},
				{"mode", func(n *yaml.Node, path string) {
					modeNode = n
					d.fileMode(&c.Admin.Mode)(n, path)
				}},
			})
			c.Admin.Mode = d.unixMode(c.Admin.Address, c.Admin.Mode, modeNode, path)
		}},
		{"routes", func(n *yaml.Node, path string) {
			count := d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				r := Route{Line: n.Line}
				var strip, rewriteNode, respondNode *yaml.Node
				present := d.mapping(n, path, []field{
					{"host", d.str(&r.Host, checkHost)},
					{"path_prefix", d.str(&r.PathPrefix, checkPathPrefix)},
					{"path", d.str(&r.Path, checkPath)},
					{"path_regex", func(n *yaml.Node, path string) { d.routePathRegex(n, path, &r) }},
					{"upstream", func(n *yaml.Node, path string) {
						if d.str(&r.Upstream, checkNotEmpty)(n, path); r.Upstream != "" {
							routeUpstreams = append(routeUpstreams, located{n, path})
						}
					}},
					{"strip_prefix", d.routeStripPrefix(&r, &strip)},
					{"rewrite", func(n *yaml.Node, path string) { rewriteNode = n; r.Rewrite = d.routeRewrite(n, path) }},
					{"headers", func(n *yaml.Node, path string) { d.routeHeaders(n, path, &r.Headers) }},
					{"allow", d.prefixes(&r.Allow)},
					{"deny", d.prefixes(&r.Deny)},
					{"limits", func(n *yaml.Node, path string) { d.routeLimits(n, path, &r.Limits) }},
					{"static", func(n *yaml.Node, path string) { r.Static = d.routeStatic(n, path) }},
					{"compress", func(n *yaml.Node, path string) { r.Compress = d.routeCompress(n, path) }},
					{"rate_limit", func(n *yaml.Node, path string) { r.RateLimit = d.routeRateLimit(n, path) }},
					{"respond", func(n *yaml.Node, path string) { respondNode = n; r.Respond = d.routeRespond(n, path) }},
					{"errors", func(n *yaml.Node, path string) { r.Errors = d.errorPages(n, path) }},
					{"basic_auth", func(n *yaml.Node, path string) { r.BasicAuth = d.routeBasicAuth(n, path) }},
					{"forward_auth", func(n *yaml.Node, path string) { r.ForwardAuth = d.routeForwardAuth(n, path) }},
					{"idempotency", func(n *yaml.Node, path string) { r.Idempotency = d.routeIdempotency(n, path) }},
					{"cache", func(n *yaml.Node, path string) { r.Cache = d.routeCache(n, path) }},
				})
				d.routeTarget(n, path, present)
				d.routePathKeys(n, path, present)
				d.checkStripPrefix(strip, join(path, "strip_prefix"), &r)
				d.checkRewrite(rewriteNode, join(path, "rewrite"), &r)
				d.checkRespond(respondNode, join(path, "respond"), &r)
				c.Routes = append(c.Routes, r)
				routeNodes = append(routeNodes, located{n, path})
			})
			if count == 0 && isList(n) {
				d.addf(n, path, "at least one route is required, such as [{upstream: web}]")
			}
		}},
		{"redis", func(n *yaml.Node, path string) { c.Redis = d.redis(n, path) }},
		{"errors", func(n *yaml.Node, path string) { c.Errors = d.errorPages(n, path) }},
		{"cache", func(n *yaml.Node, path string) { c.Cache = d.cacheSection(n, path) }},
		{"upstreams", func(n *yaml.Node, path string) {
			d.upstreams(n, path, c)
			if len(c.Upstreams) == 0 && (isNull(n) || n.Kind == yaml.MappingNode) {
				d.addf(n, path, "at least one upstream is required, such as {web: {servers: [{address: 127.0.0.1:9001}]}}")
			}
		}},
	})
	d.required(n, "", present, "listen", "routes", "upstreams")

	// Cross-field checks.
	d.checkRedisUsers(c)
	d.checkShadowed(c.Routes, routeNodes)
	d.checkIdempotency(c)
	d.checkCache(c)
	d.checkACMERedis(c)
	seen := map[string]*yaml.Node{}
	for _, a := range listenAddrs {
		if hasPort0(a.n.Value) {
			continue // each gets a port of its own
		}
		if f, dup := seen[a.n.Value]; dup {
			d.addf(a.n, a.path, "address %s is listed twice (first at line %d)", a.n.Value, f.Line)
			continue
		}
		seen[a.n.Value] = a.n
	}
	if clientIPNode != nil && len(c.Forwarded.Trusted) == 0 && !c.Forwarded.TrustUnix {
		d.addf(clientIPNode, "forwarded.client_ip", "x_forwarded_for needs forwarded.trusted: only a trusted peer's X-Forwarded-For may name the client")
	}
	if metricsAddr != nil {
		if f, dup := seen[metricsAddr.Value]; dup {
			d.addf(metricsAddr, "metrics.address", "same address as the listener at line %d; metrics need an address of their own", f.Line)
		}
	}
	if adminAddr != nil && !hasPort0(adminAddr.Value) {
		if f, dup := seen[adminAddr.Value]; dup {
			d.addf(adminAddr, "admin.address", "same address as the listener at line %d; the admin listener needs an address of its own", f.Line)
		} else if metricsAddr != nil && metricsAddr.Value == adminAddr.Value {
			d.addf(adminAddr, "admin.address", "same address as metrics.address (line %d); the admin listener serves /metrics too, so leave metrics.address out", metricsAddr.Line)
		}
	}
	if len(c.Upstreams) > 0 { // else "upstreams" has been reported
		names := make([]string, len(c.Upstreams))
		for i, u := range c.Upstreams {
			names[i] = u.Name
		}
		for _, r := range routeUpstreams {
			if !slices.Contains(names, r.n.Value) {
				d.addf(r.n, r.path, "no upstream named %q%s (defined: %s)",
					r.n.Value, suggest(r.n.Value, names), strings.Join(names, ", "))
			}
		}
	}
}

// located is a value node with its key path, kept for checks that
// need the whole file.
type located struct {
	n    *yaml.Node
	path string
}

// upstreamName is what an upstream name may look like.
var upstreamName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// upstreams walks the "upstreams" mapping into c.Upstreams.
func (d *decoder) upstreams(n *yaml.Node, path string, c *Config) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.addf(n, path, "must be a mapping from upstream name to upstream, not %s", describe(n))
		return
	}
	for _, p := range d.pairs(n, path, nil) {
		if d.stop() {
			return
		}
		name := p.key.Value
		upath := join(path, name)
		if !upstreamName.MatchString(name) {
			d.addf(p.key, upath, "an upstream name may only hold letters, digits, '_', '.' and '-'")
		}
		u := defaultUpstream(name, p.key.Line)
		d.upstream = upath
		d.walkUpstream(p.key, p.value, upath, u)
		d.upstream = ""
		c.Upstreams = append(c.Upstreams, u)
	}
}

// walkUpstream walks one upstream; key is its name's node, which
// missing servers are reported at.
func (d *decoder) walkUpstream(key, n *yaml.Node, path string, u *Upstream) {
	var hashKeyNode, protocolNode, tlsNode *yaml.Node
	var unixServer string // the first server at a Unix socket, for messages
	present := d.mapping(n, path, []field{
		{"servers", func(n *yaml.Node, path string) {
			count := d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				s := Server{Weight: 1, Line: n.Line, Resolve: 10 * time.Second}
				present := d.mapping(n, path, []field{
					{"address", func(n *yaml.Node, path string) { d.address(&s.Address, n, path, false) }},
					{"weight", d.integer(&s.Weight, between(1, 1000))},
					{"backup", d.boolean(&s.Backup)},
					{"resolve", d.duration(&s.Resolve, true)},
				})
				d.required(n, path, present, "address")
				if _, unix := sock.UnixPath(s.Address); unix && unixServer == "" {
					unixServer = s.Address
				}
				u.Servers = append(u.Servers, s)
			})
			if count == 0 && isList(n) {
				d.addf(n, path, "at least one server is required, such as [{address: 127.0.0.1:9001}]")
			}
		}},
		{"timeouts", func(n *yaml.Node, path string) {
			t := &u.Timeouts
			d.mapping(n, path, []field{
				{"connect", d.duration(&t.Connect, true)},
				{"response_header", d.duration(&t.ResponseHeader, true)},
				{"read", d.duration(&t.Read, true)},
				{"write", d.duration(&t.Write, true)},
			})
		}},
		{"pool", func(n *yaml.Node, path string) {
			p := &u.Pool
			d.mapping(n, path, []field{
				{"max_idle", d.integer(&p.MaxIdle, atLeast(0))},
				{"idle_timeout", d.duration(&p.IdleTimeout, true)},
				{"max_requests", d.integer(&p.MaxRequests, atLeast(0))},
				{"max_age", d.duration(&p.MaxAge, false)},
				{"non_idempotent", d.enum(&p.NonIdempotent, pool.Learn.String(), pool.Dial.String(), pool.Reuse.String())},
				{"non_idempotent_max_idle", func(n *yaml.Node, path string) {
					if n.Kind == yaml.ScalarNode && (n.Value == "0" || n.Value == "0s") {
						// Before non_idempotent existed, 0s meant "dial".
						d.addf(n, path, "must be > 0; for a new connection per such request, set non_idempotent: dial")
						return
					}
					d.duration(&p.NonIdempotentMaxIdle, true)(n, path)
				}},
			})
		}},
		{"retry", func(n *yaml.Node, path string) { d.retry(n, path, &u.Retry) }},
		{"tls", func(n *yaml.Node, path string) {
			tlsNode = n
			u.TLS = d.tls(n, path)
		}},
		{"host", d.str(&u.Host, checkCheckHost)},
		{"protocol", func(n *yaml.Node, path string) {
			protocolNode = n
			d.enum(&u.Protocol, "http/1.1", "h2", "h2c", "auto")(n, path)
		}},
		{"balance", d.enum(&u.Balance, balance.PolicyNames()...)},
		{"hash_key", func(n *yaml.Node, path string) {
			hashKeyNode = n
			d.str(&u.HashKey, checkHashKey)(n, path)
		}},
		{"health", func(n *yaml.Node, path string) { d.health(n, path, &u.Health) }},
	})
	if !present["servers"] {
		d.addf(key, join(path, "servers"), "missing; an upstream needs at least one server")
	}
	switch {
	case protocolNode == nil:
	case (u.Protocol == "h2" || u.Protocol == "auto") && u.TLS == nil:
		d.addf(protocolNode, join(path, "protocol"), "%s is HTTP/2 over TLS and this upstream has no tls; use h2c for cleartext HTTP/2, or add tls: {}", u.Protocol)
	case u.Protocol == "h2c" && u.TLS != nil:
		d.addf(protocolNode, join(path, "protocol"), "h2c is cleartext HTTP/2 and this upstream has tls; use h2 (or auto)")
	}
	if tlsNode != nil && unixServer != "" {
		// A Unix socket is on this machine, guarded by its file's
		// permissions; and it has no host name to verify a certificate
		// against.
		d.addf(tlsNode, join(path, "tls"), "TLS to a Unix socket (%s) is not supported; remove tls, or reach that server over TCP", unixServer)
	}
	if hashKeyNode != nil && u.Balance != "hash" {
		d.addf(hashKeyNode, join(path, "hash_key"), "only used with balance: hash (balance is %s)", u.Balance)
	}
}

// tls walks an upstream's "tls" mapping. Whether its files can be read
// and hold what they should is for Build to find.
func (d *decoder) tls(n *yaml.Node, path string) *UpstreamTLS {
	t := &UpstreamTLS{Line: n.Line}
	var certNode, keyNode, caNode, insecureNode *yaml.Node
	d.mapping(n, path, []field{
		{"server_name", d.str(&t.ServerName, checkServerName)},
		{"ca", func(n *yaml.Node, path string) {
			caNode = n
			d.str(&t.CA, checkNotEmpty)(n, path)
		}},
		{"cert", func(n *yaml.Node, path string) {
			certNode = n
			d.str(&t.Cert, checkNotEmpty)(n, path)
		}},
		{"key", func(n *yaml.Node, path string) {
			keyNode = n
			d.str(&t.Key, checkNotEmpty)(n, path)
		}},
		{"insecure_skip_verify", func(n *yaml.Node, path string) {
			insecureNode = n
			d.boolean(&t.InsecureSkipVerify)(n, path)
		}},
	})
	switch {
	case certNode != nil && keyNode == nil:
		d.addf(certNode, join(path, "cert"), "needs key, the file of its private key")
	case keyNode != nil && certNode == nil:
		d.addf(keyNode, join(path, "key"), "needs cert, the file of the certificate it is the key of")
	}
	if caNode != nil && t.InsecureSkipVerify {
		d.addf(insecureNode, join(path, "insecure_skip_verify"), "verifies nothing, so ca would go unused; leave one of them out")
	}
	return t
}

// checkServerName validates tls.server_name: a host name or an IP
// address, without a port.
func checkServerName(s string) (string, string) {
	if _, err := netip.ParseAddr(s); err == nil {
		return s, ""
	}
	if strings.Contains(s, ":") {
		return "", "must not include a port"
	}
	if !isHostName(s) {
		return "", "not a valid name: want a DNS name such as api.internal, or an IP address"
	}
	return strings.TrimSuffix(strings.ToLower(s), "."), ""
}

// checkHashKey validates a hash_key value.
func checkHashKey(s string) (string, string) {
	if _, err := balance.ParseHashKey(s); err != nil {
		return "", "must be client_ip, header:NAME, cookie:NAME or uri"
	}
	return s, ""
}

// health walks an upstream's "health" mapping into h (see Upstream.Health
// for where each key goes).
func (d *decoder) health(n *yaml.Node, path string, h *balance.Options) {
	d.mapping(n, path, []field{
		{"passive", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"max_fails", d.offIfZero(&h.MaxFails)},
				{"fail_timeout", d.duration(&h.FailTimeout, true)},
				{"statuses", d.statuses(&h.Statuses)},
				{"consecutive_failures", d.offIfZero(&h.ConsecutiveFailures)},
				{"base_ejection", d.duration(&h.BaseEjection, true)},
				{"max_ejection", d.duration(&h.MaxEjection, true)},
				{"max_ejected_percent", d.integer(&h.MaxEjectedPercent, between(1, 100))},
			})
		}},
		{"active", func(n *yaml.Node, path string) {
			a := defaultActive()
			d.mapping(n, path, []field{
				{"path", d.str(&a.Path, checkCheckPath)},
				{"method", d.str(&a.Method, checkToken)},
				{"host", d.str(&a.Host, checkCheckHost)},
				{"expect", d.statuses(&a.Expect)},
				{"body", d.str(&a.BodyContains, func(s string) (string, string) { return s, "" })},
				{"tcp", d.boolean(&a.TCP)},
				{"interval", d.duration(&a.Interval, true)},
				{"timeout", d.duration(&a.Timeout, true)},
				{"rise", d.integer(&a.Rise, between(1, 100))},
				{"fall", d.integer(&a.Fall, between(1, 100))},
			})
			h.Active = a
		}},
		{"slow_start", d.duration(&h.SlowStart, false)},
	})
}

// offIfZero returns a parser of a count >= 0 into dst for a rule the file
// turns off with 0: a 0 is held as -1, which is balance's off (its 0 means
// the default).
func (d *decoder) offIfZero(dst *int) func(*yaml.Node, string) {
	count := d.integer(dst, atLeast(0))
	return func(n *yaml.Node, path string) {
		if count(n, path); *dst == 0 {
			*dst = -1
		}
	}
}

// statuses returns a parser of a list of HTTP status codes (100..599).
func (d *decoder) statuses(dst *[]int) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if n.Kind != yaml.SequenceNode {
			d.addf(n, path, "must be a list of status codes, such as [502, 503]")
			return
		}
		list := []int{}
		d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
			var v int
			d.integer(&v, between(100, 599))(n, path)
			if v != 0 {
				list = append(list, v)
			}
		})
		*dst = list
	}
}

func checkCheckPath(s string) (string, string) {
	if !strings.HasPrefix(s, "/") || strings.ContainsAny(s, " \t\r\n") {
		return "", "must start with / and hold no whitespace"
	}
	return s, ""
}

func checkCheckHost(s string) (string, string) {
	if s == "" || strings.ContainsAny(s, " \t\r\n,/@") {
		return "", "must be a host name, optionally with :port"
	}
	return s, ""
}

func checkToken(s string) (string, string) {
	for _, c := range s {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", c) {
			return "", "must be an HTTP method (a token)"
		}
	}
	if s == "" {
		return "", "must not be empty"
	}
	return strings.ToUpper(s), ""
}

// retry walks an upstream's "retry" mapping into r.
func (d *decoder) retry(n *yaml.Node, path string, r *Retry) {
	var baseNode, maxNode *yaml.Node
	d.mapping(n, path, []field{
		{"tries", d.integer(&r.Tries, checkTries)},
		{"on", func(n *yaml.Node, path string) { d.retryOn(n, path, r) }},
		{"non_idempotent", d.enum(&r.NonIdempotent, retry.Never.String(), retry.Keyed.String(), retry.Always.String())},
		{"idempotency_header", d.str(&r.IdempotencyHeader, checkFieldName)},
		{"timeout", d.duration(&r.Timeout, false)},
		{"backoff", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"base", func(n *yaml.Node, path string) {
					baseNode = n
					d.duration(&r.Backoff.Base, false)(n, path)
				}},
				{"max", func(n *yaml.Node, path string) {
					maxNode = n
					d.duration(&r.Backoff.Max, false)(n, path)
				}},
			})
		}},
		{"budget", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"ratio", d.float(&r.Budget.Ratio, 0, 1)},
				{"min_per_second", d.float(&r.Budget.MinPerSecond, 0, -1)},
			})
		}},
		{"body_buffer", d.size(&r.BodyBuffer, 0, 64<<20)},
	})
	if r.Backoff.Max < r.Backoff.Base {
		if maxNode != nil {
			d.addf(maxNode, join(path, "backoff.max"), "must be >= backoff.base (%s)", r.Backoff.Base)
		} else {
			d.addf(baseNode, join(path, "backoff.base"), "must be <= backoff.max (%s by default)", r.Backoff.Max)
		}
	}
	if len(r.On) == 0 {
		r.Tries = 1
	}
}

// retryOn walks the "on" list of a retry policy into r.On.
func (d *decoder) retryOn(n *yaml.Node, path string, r *Retry) {
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		d.addf(n, path, "must be a list, such as [%s]", n.Value)
		return
	}
	on := []string{}
	var off *located
	d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
		var v string
		if !d.scalarString(&v, n, path) {
			return
		}
		v = strings.ToLower(v)
		if v == "off" {
			off = &located{n, path}
			return
		}
		if !slices.Contains(retryConditions, v) {
			d.addf(n, path, "unknown retry condition %q; want one of %s, or off", n.Value, strings.Join(retryConditions, ", "))
			return
		}
		if !slices.Contains(on, v) {
			on = append(on, v)
		}
	})
	if isNull(n) {
		d.addf(n, path, "no value; write [] or [off] for no retries")
		return
	}
	if off != nil && len(on) > 0 {
		d.addf(off.n, off.path, "off may not be combined with retry conditions; write [off] alone for no retries")
	}
	r.On = on
}

// routeTarget checks that a route has what answers it: an upstream,
// static files or its own answer, one of them.
func (d *decoder) routeTarget(n *yaml.Node, path string, present map[string]bool) {
	var given []string
	for _, k := range []string{"upstream", "static", "respond"} {
		if present[k] {
			given = append(given, k)
		}
	}
	switch {
	case len(given) > 1:
		d.addf(n, join(path, given[1]), "a route has one of upstream, static or respond; this one gives %s", strings.Join(given, " and "))
	case len(given) == 0:
		d.addf(n, join(path, "upstream"), "missing; a route needs an upstream (or static: {root: DIR}, or respond: {...})")
	}
}

// routeStatic walks a route's "static" mapping. The root is resolved
// against the config file's directory and must be a directory now.
func (d *decoder) routeStatic(n *yaml.Node, path string) *Static {
	st := &Static{Index: DefaultStaticIndex, Line: n.Line}
	var rootNode *yaml.Node
	present := d.mapping(n, path, []field{
		{"root", func(n *yaml.Node, path string) {
			if d.str(&st.Root, checkNotEmpty)(n, path); st.Root != "" {
				rootNode = n
			}
		}},
		{"index", d.str(&st.Index, checkIndex)},
		{"dotfiles", d.boolean(&st.Dotfiles)},
		{"cache_control", d.str(&st.CacheControl, checkFieldValue)},
	})
	if resolve(n).Kind == yaml.MappingNode {
		d.required(n, path, present, "root")
	}
	if rootNode != nil {
		if !filepath.IsAbs(st.Root) {
			st.Root = filepath.Join(filepath.Dir(d.file), st.Root)
		}
		switch fi, err := os.Stat(st.Root); {
		case errors.Is(err, fs.ErrNotExist):
			d.addf(rootNode, join(path, "root"), "directory %s does not exist (a relative root is relative to the config file's directory)", st.Root)
		case err != nil:
			d.addf(rootNode, join(path, "root"), "%v", err)
		case !fi.IsDir():
			d.addf(rootNode, join(path, "root"), "%s is not a directory", st.Root)
		}
	}
	return st
}

// checkIndex validates static.index: a file name, or "" for none.
func checkIndex(s string) (string, string) {
	if s != "" && (filepath.Base(s) != s || strings.ContainsAny(s, `/\`) || s[0] == '.') {
		return "", "must be a file name such as index.html, without a directory"
	}
	return s, ""
}

// checkFieldValue validates a header field's value: visible ASCII, spaces
// and tabs, not starting or ending with white space (RFC 9110 §5.5).
func checkFieldValue(s string) (string, string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c >= 0x7f {
			return "", fmt.Sprintf("must not contain %q: a header field value is visible ASCII", c)
		}
	}
	if strings.TrimSpace(s) != s {
		return "", "must not start or end with white space"
	}
	return s, ""
}

// routeCompress walks a route's "compress" mapping (see Compress).
func (d *decoder) routeCompress(n *yaml.Node, path string) *Compress {
	c := &Compress{MinSize: DefaultCompressMinSize}
	d.mapping(n, path, []field{
		{"algorithms", func(n *yaml.Node, path string) {
			c.Algorithms = []string{}
			seen := map[string]int{}
			count := d.sequence(n, path, func(i int, n *yaml.Node, path string) {
				var name string
				known := []string{"zstd", "br", "gzip"}
				d.enum(&name, known...)(n, path)
				if name == "" {
					return
				}
				if first, dup := seen[name]; dup {
					d.addf(n, path, "%s is listed twice (first at line %d)", name, first)
					return
				}
				seen[name] = n.Line
				c.Algorithms = append(c.Algorithms, name)
			})
			if count == 0 && isList(n) {
				d.addf(n, path, "at least one algorithm is required: zstd, br or gzip (leave the key out for all three)")
			}
		}},
		{"min_size", d.size(&c.MinSize, 0, 1<<30)},
		{"types", func(n *yaml.Node, path string) {
			c.Types = []string{}
			count := d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				var t string
				d.str(&t, func(s string) (string, string) {
					if err := compress.CheckType(s); err != nil {
						return "", err.Error()
					}
					return strings.ToLower(s), ""
				})(n, path)
				if t != "" {
					c.Types = append(c.Types, t)
				}
			})
			if count == 0 && isList(n) {
				d.addf(n, path, "at least one media type is required, such as [text/*, application/json]")
			}
		}},
		{"level", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"zstd", d.integer(&c.Level.Zstd, between(1, 22))},
				{"br", d.integer(&c.Level.Brotli, between(1, 11))},
				{"gzip", d.integer(&c.Level.Gzip, between(1, 9))},
			})
		}},
	})
	return c
}
