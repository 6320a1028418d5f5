package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/accesslog"
	"github.com/sluice-proxy/sluice/internal/sock"
	"go.yaml.in/yaml/v3"
)

// This file holds the parsers of single values: each reports what is
// wrong at the value's node and leaves the destination (holding its
// default) alone.

// describe names the kind of value n holds, for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return n.Value
		}
		return strconv.Quote(n.Value)
	}
	return "an unexpected YAML node"
}

// scalarString stores the text of the scalar n in dst. It reports n
// being null, a list or a mapping, and returns whether it stored.
func (d *decoder) scalarString(dst *string, n *yaml.Node, path string) bool {
	switch {
	case isNull(n):
		d.addf(n, path, "no value given; give one, or leave the key out")
		return false
	case n.Kind != yaml.ScalarNode:
		d.addf(n, path, "must be a single value, not %s", describe(n))
		return false
	}
	*dst = n.Value
	return true
}

// str returns a parser of a string into dst. check, if not nil,
// validates the string and returns it normalised, or a message saying
// what is wrong.
func (d *decoder) str(dst *string, check func(string) (v, msg string)) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		if check != nil {
			v, msg := check(s)
			if msg != "" {
				d.addf(n, path, "%s", msg)
				return
			}
			s = v
		}
		*dst = s
	}
}

// checkNotEmpty rejects the empty string.
func checkNotEmpty(s string) (string, string) {
	if s == "" {
		return "", "must not be empty"
	}
	return s, ""
}

// enum returns a parser of one of the values allowed into dst. Values
// are matched case-insensitively and stored as given in allowed.
func (d *decoder) enum(dst *string, allowed ...string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		for _, a := range allowed {
			if strings.EqualFold(s, a) {
				*dst = a
				return
			}
		}
		d.addf(n, path, "unknown value %q%s; want one of %s", s, suggest(s, allowed), strings.Join(allowed, ", "))
	}
}

// boolean returns a parser of true or false into dst.
func (d *decoder) boolean(dst *bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		if n.ShortTag() == "!!bool" {
			if err := n.Decode(dst); err == nil {
				return
			}
		}
		switch strings.ToLower(s) {
		case "yes", "no", "on", "off", "y", "n":
			// YAML 1.1 booleans, which YAML 1.2 and yaml.v3 read as strings.
			d.addf(n, path, "must be true or false, not %q", s)
		default:
			d.addf(n, path, "must be true or false, not %s", describe(n))
		}
	}
}

// between returns a check of an integer in lo..hi.
func between(lo, hi int64) func(int64) string {
	return func(v int64) string {
		if v < lo || v > hi {
			return fmt.Sprintf("must be between %d and %d", lo, hi)
		}
		return ""
	}
}

// atLeast returns a check of an integer >= lo.
func atLeast(lo int64) func(int64) string {
	return func(v int64) string {
		if v < lo {
			return fmt.Sprintf("must be >= %d", lo)
		}
		return ""
	}
}

// integer returns a parser of a whole number into dst; check returns a
// message saying what is wrong with the number, or "". A quoted number
// is not a number.
func (d *decoder) integer(dst *int, check func(int64) string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		var v int64
		if n.ShortTag() != "!!int" || n.Decode(&v) != nil || v != int64(int(v)) {
			d.addf(n, path, "must be a whole number, not %s", describe(n))
			return
		}
		if msg := check(v); msg != "" {
			d.addf(n, path, "%s", msg)
			return
		}
		*dst = int(v)
	}
}

// float returns a parser of a number in lo..hi into dst; hi < lo means
// no upper bound.
func (d *decoder) float(dst *float64, lo, hi float64) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		var v float64
		if tag := n.ShortTag(); (tag != "!!int" && tag != "!!float") || n.Decode(&v) != nil ||
			math.IsNaN(v) || math.IsInf(v, 0) {
			d.addf(n, path, "must be a number, not %s", describe(n))
			return
		}
		switch {
		case hi < lo && v < lo:
			d.addf(n, path, "must be >= %g", lo)
		case hi >= lo && (v < lo || v > hi):
			d.addf(n, path, "must be between %g and %g", lo, hi)
		default:
			*dst = v
		}
	}
}

// duration returns a parser of a Go duration ("250ms", "30s", "1m")
// into dst. A bare 0 means zero; negative durations are rejected, and
// so is zero when positive is set.
func (d *decoder) duration(dst *time.Duration, positive bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		var v time.Duration
		switch n.ShortTag() {
		case "!!int", "!!float":
			var f float64
			if n.Decode(&f) != nil || f != 0 {
				d.addf(n, path, "%s has no unit; want a Go duration such as 250ms, 30s or 1m (a bare number is only allowed for 0)", s)
				return
			}
		default:
			var err error
			if v, err = time.ParseDuration(s); err != nil {
				d.addf(n, path, "invalid duration %q; want a Go duration such as 250ms, 30s or 1m", s)
				return
			}
		}
		switch {
		case v < 0:
			d.addf(n, path, "must not be negative")
		case v == 0 && positive:
			d.addf(n, path, "must be > 0")
		default:
			*dst = v
		}
	}
}

// sizeUnits are the units a size may carry, with their multipliers.
var sizeUnits = map[string]int64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

// sizeText splits a size into its number and its unit, with any
// spaces between them.
var sizeText = regexp.MustCompile(`^([0-9]+)(\s*)([A-Za-z]*)$`)

// size returns a parser of a size in lo..hi into dst: a whole number
// of bytes, or a whole number with a binary unit, B, KiB, MiB or GiB.
// Decimal units (KB, MB, ...) are rejected: whether they mean 1000 or
// 1024 is anyone's guess.
func (d *decoder) size(dst *int64, lo, hi int64) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		v, msg := parseSize(n, s)
		switch {
		case msg != "":
			d.addf(n, path, "%s", msg)
		case v < lo || v > hi:
			d.addf(n, path, "must be between %s and %s", formatSize(lo), formatSize(hi))
		default:
			*dst = v
		}
	}
}

// parseSize parses the size s held by n, returning it in bytes or a
// message saying what is wrong.
func parseSize(n *yaml.Node, s string) (int64, string) {
	const want = "want a number of bytes, or a whole number with B, KiB, MiB or GiB such as 64KiB"
	if n.ShortTag() == "!!int" {
		var v int64
		if n.Decode(&v) != nil {
			return 0, fmt.Sprintf("invalid size %s; %s", s, want)
		}
		return v, "" // the caller checks the range
	}
	m := sizeText.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Sprintf("invalid size %q; %s", s, want)
	}
	num, space, unit := m[1], m[2], m[3]
	mult, ok := sizeUnits[unit]
	if unit == "" {
		mult, ok = 1, true
	}
	if !ok {
		binary := ""
		for u := range sizeUnits {
			if strings.EqualFold(u, unit) {
				binary = u
			}
		}
		switch strings.ToLower(unit) {
		case "k", "kb", "m", "mb", "g", "gb":
			return 0, fmt.Sprintf("decimal unit %q is ambiguous (1000 or 1024?); use a binary unit, such as %s%ciB, or a number of bytes",
				unit, num, upperASCII(unit[0]))
		}
		if binary != "" {
			return 0, fmt.Sprintf("units are case-sensitive: write %s%s", num, binary)
		}
		return 0, fmt.Sprintf("unknown unit %q in size %q; %s", unit, s, want)
	}
	if space != "" {
		return 0, fmt.Sprintf("invalid size %q: write it without a space, as %s%s", s, num, unit)
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v > math.MaxInt64/mult {
		return 0, fmt.Sprintf("size %q is too large", s)
	}
	return v * mult, ""
}

// upperASCII upper-cases an ASCII letter.
func upperASCII(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// formatSize writes n bytes with the largest binary unit that divides it.
func formatSize(n int64) string {
	for _, u := range []string{"GiB", "MiB", "KiB"} {
		if m := sizeUnits[u]; n != 0 && n%m == 0 {
			return strconv.FormatInt(n/m, 10) + u
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// address parses a host:port into dst, reporting what is wrong at n.
// A listen address may have an empty host and port 0; a server
// address, which is dialed, may not. It returns whether it stored.
func (d *decoder) address(dst *string, n *yaml.Node, path string, listen bool) bool {
	var s string
	if !d.scalarString(&s, n, path) {
		return false
	}
	if msg := checkAddress(s, listen); msg != "" {
		d.addf(n, path, "%s", msg)
		return false
	}
	*dst = s
	return true
}

// checkAddress validates a host:port, or a server's "unix:PATH"; see
// decoder.address.
func checkAddress(s string, listen bool) string {
	if path, unix := sock.UnixPath(s); unix {
		return checkUnixPath(s, path)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Sprintf("%q is not a host:port address: %s", s, ae.Err)
		}
		return fmt.Sprintf("%q is not a host:port address", s)
	}
	switch {
	case host == "" && !listen:
		return fmt.Sprintf("%q has no host", s)
	case host != "" && !isIPv6(host) && !isHostName(host):
		return fmt.Sprintf("%q: %q is neither an IP address nor a DNS name", s, host)
	}
	lowest := uint64(1)
	if listen {
		lowest = 0
	}
	// ParseUint accepts neither signs nor spaces.
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p < lowest {
		return fmt.Sprintf("%q: the port must be a number in %d..65535", s, lowest)
	}
	return ""
}

// checkUnixPath validates the path of a "unix:PATH" address s: a server's,
// or one sluice listens on.
func checkUnixPath(s, path string) string {
	switch {
	case path == "":
		return fmt.Sprintf("%q has no socket path, such as unix:/run/gunicorn.sock", s)
	case path[0] != '/':
		return fmt.Sprintf("%q: the socket path must be absolute (start with /)", s)
	case strings.IndexByte(path, 0) >= 0:
		return fmt.Sprintf("%q: the socket path holds a NUL byte", s)
	case len(path) > sock.MaxUnixPath:
		return fmt.Sprintf("%q: the socket path is %d bytes long; a Unix socket's may be at most %d", s, len(path), sock.MaxUnixPath)
	}
	return ""
}

// isIPv6 reports whether s is an IPv6 address, possibly with a zone.
func isIPv6(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6()
}

// isHostName reports whether s is a DNS name (which covers IPv4
// addresses): dot-separated labels, any trailing dot aside.
func isHostName(s string) bool {
	s = strings.TrimSuffix(strings.ToLower(s), ".")
	if len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !isHostLabel(l) {
			return false
		}
	}
	return true
}

// hasPort0 reports whether the host:port s has port 0.
func hasPort0(s string) bool {
	_, port, err := net.SplitHostPort(s)
	return err == nil && port == "0"
}

// suggest returns ` (did you mean "x"?)` if s is a likely typo of the
// candidate x, or "".
func suggest(s string, candidates []string) string {
	if x := suggestion(s, candidates); x != "" {
		return fmt.Sprintf(" (did you mean %q?)", x)
	}
	return ""
}

// suggestion returns the candidate closest to s if it is close enough
// for s to be a likely typo of it, or "". Case is ignored.
func suggestion(s string, candidates []string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		if len(s) > len(c)+2 || len(c) > len(s)+2 {
			continue // more than 2 edits apart, and possibly long
		}
		dist := editDistance(strings.ToLower(s), strings.ToLower(c))
		if bestDist < 0 || dist < bestDist {
			best, bestDist = c, dist
		}
	}
	if bestDist < 0 || bestDist > 2 || bestDist*2 > len(best) {
		return ""
	}
	return best
}

// editDistance returns the optimal string alignment distance between
// a and b, counting bytes: the Levenshtein distance, with the swap of
// two adjacent bytes ("wbe" for "web") counting as one edit.
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// checkTries validates retry.tries.
func checkTries(v int64) string {
	switch {
	case v == 0:
		return "must be >= 1 (it counts attempts, the first included); 0 would mean no attempt at all"
	case v < 0:
		return "must be >= 1 (it counts attempts, the first included)"
	case v > 20:
		return "must be <= 20 (it counts attempts, the first included)"
	}
	return ""
}

// checkHost validates and normalises a route's host.
func checkHost(s string) (string, string) {
	if s == "" {
		return "", "must not be empty; leave host out to match any host"
	}
	h := strings.ToLower(s)
	if strings.HasPrefix(h, "[") {
		if !strings.HasSuffix(h, "]") || !isIPv6(h[1:len(h)-1]) {
			return "", "not a valid host: a bracketed host must be an IPv6 address, such as [::1]"
		}
		return h, ""
	}
	h = strings.TrimSuffix(h, ".")
	if strings.Contains(h, ":") {
		return "", "must not include a port (the port is ignored when matching)"
	}
	labels := strings.Split(h, ".")
	if labels[0] == "*" {
		labels = labels[1:]
		if len(labels) == 0 {
			return "", `"*" alone is not a host pattern; leave host out to match any host`
		}
	}
	for _, l := range labels {
		if !isHostLabel(l) {
			return "", `not a valid host: want a DNS name such as api.example.com, optionally starting with "*."`
		}
	}
	return h, ""
}

// isHostLabel reports whether l is a DNS label: letters, digits, '-'
// and '_', 1..63 bytes.
func isHostLabel(l string) bool {
	if len(l) == 0 || len(l) > 63 {
		return false
	}
	for _, c := range []byte(l) {
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// checkPathPrefix validates a route's path prefix.
func checkPathPrefix(s string) (string, string) {
	if !strings.HasPrefix(s, "/") {
		return "", `must start with "/"`
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '?' || c == '#':
			return "", fmt.Sprintf("must not contain %q: a path prefix is matched against the path only", c)
		case c <= ' ' || c >= 0x7f:
			// Request targets are ASCII without spaces or controls
			// (RFC 9112, section 3.2; RFC 3986, section 2).
			return "", fmt.Sprintf("must not contain %q; percent-encode it as it appears in request paths", c)
		}
	}
	return s, ""
}

// checkFieldName validates an HTTP field name: a token (RFC 9110,
// section 5.1 and 5.6.2).
func checkFieldName(s string) (string, string) {
	if s == "" {
		return "", "must not be empty"
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return "", fmt.Sprintf("%q is not a valid HTTP field name: %q is not allowed in one", s, s[i])
		}
	}
	return s, ""
}

// isTokenChar reports whether c is a tchar (RFC 9110, section 5.6.2).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// protocols returns a parser of a listener's protocols: a list of "h2",
// "http/1.1" and "h2c", each at most once (checkProtocols checks them
// against the listener).
func (d *decoder) protocols(dst *[]string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if n.Kind != yaml.SequenceNode {
			d.addf(n, path, "must be a list of protocols, such as [h2, http/1.1]")
			return
		}
		list := []string{}
		d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
			var p string
			d.enum(&p, "h3", "h2", "http/1.1", "h2c")(n, path)
			switch {
			case p == "":
			case slices.Contains(list, p):
				d.addf(n, path, "%s is listed twice", p)
			default:
				list = append(list, p)
			}
		})
		if len(list) == 0 && len(n.Content) == 0 {
			d.addf(n, path, "must list at least one protocol")
		}
		*dst = list
	}
}

// checkProtocols checks a listener's protocols against its kind: h2 and
// http/1.1 over TLS, http/1.1 and h2c in the clear.
func (d *decoder) checkProtocols(n *yaml.Node, path string, l *Listener) {
	for _, p := range l.Protocols {
		switch {
		case p == "h2" && l.TLS == nil:
			d.addf(n, path, "h2 is HTTP/2 over TLS and this listener has no tls; use h2c for cleartext HTTP/2")
		case p == "h2c" && l.TLS != nil:
			d.addf(n, path, "h2c is cleartext HTTP/2 and this listener has tls; use h2")
		case p == "h3" && l.TLS == nil:
			d.addf(n, path, "h3 is HTTP/3 over QUIC, which has TLS built in, and this listener has no tls")
		case p == "h3" && isUnix(l.Address):
			d.addf(n, path, "h3 is HTTP/3 over QUIC (UDP); a Unix socket listener cannot serve it")
		case p == "h3" && len(l.Protocols) == 1:
			d.addf(n, path, "h3 needs h2 or http/1.1 beside it: clients find HTTP/3 by the Alt-Svc of a TCP answer")
		}
	}
}

// accessFormat returns a parser of the access log's format into a: text,
// json, a named format (combined), or a format of $fields, parsed here
// once (accesslog.Parse).
func (d *decoder) accessFormat(a *AccessLog) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		if strings.EqualFold(s, "text") || strings.EqualFold(s, "json") {
			a.Format = strings.ToLower(s)
			return
		}
		text, named := accesslog.Named(s)
		if !named && !strings.Contains(s, "$") {
			d.addf(n, path, "unknown value %q%s; want text, json, combined, or a format of fields such as '$client $method $target $status $duration'",
				s, suggest(s, []string{"text", "json", "combined"}))
			return
		}
		if !named {
			text = s
		}
		f, err := accesslog.Parse(text)
		if err != nil {
			d.addf(n, path, "%v", err)
			return
		}
		a.Format, a.template = s, f
	}
}

// fileMode returns a parser of a Unix socket's file mode into dst: octal
// digits, as chmod takes them (0660, 660 or 0o660), at most 0777.
func (d *decoder) fileMode(dst *fs.FileMode) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		var s string
		if !d.scalarString(&s, n, path) {
			return
		}
		digits := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
		m, err := strconv.ParseUint(digits, 8, 32)
		if err != nil || digits == "" || strings.ContainsAny(digits, "+-_") || m > 0o777 {
			d.addf(n, path, "%q is not a file mode: want octal digits as chmod takes them, at most 0777, such as 0660", s)
			return
		}
		*dst = fs.FileMode(m)
	}
}

// unixMode checks the mode given for the listener at address (modeNode,
// nil when none was) and returns it with its default: the mode is for a
// unix: address only, where it defaults to sock.DefaultUnixMode.
func (d *decoder) unixMode(address string, mode fs.FileMode, modeNode *yaml.Node, path string) fs.FileMode {
	if _, unix := sock.UnixPath(address); !unix {
		if modeNode != nil {
			d.addf(modeNode, join(path, "mode"), "is the mode of a Unix socket's file, for a unix: address; the address here is %q", address)
		}
		return 0
	}
	if modeNode == nil {
		return sock.DefaultUnixMode
	}
	return mode
}

// trusted returns a parser of forwarded.trusted into f: address prefixes,
// and "unix:" for the peers of Unix socket listeners (TrustUnix).
func (d *decoder) trusted(f *Forwarded) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if n.Kind == yaml.ScalarNode && !isNull(n) {
			d.addf(n, path, "must be a list, such as [%s]", n.Value)
			return
		}
		list := []netip.Prefix{}
		d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
			if n.Kind == yaml.ScalarNode && n.Value == sock.UnixPrefix {
				f.TrustUnix = true
				return
			}
			if p, ok := d.prefix(n, path, ", or unix: for the peers of Unix socket listeners"); ok {
				list = append(list, p)
			}
		})
		f.Trusted = list
	}
}

// isUnix reports whether a listen address is a Unix socket's.
func isUnix(address string) bool {
	_, unix := sock.UnixPath(address)
	return unix
}
