package route

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-proxy/sluice/proxy"
)

// Template is a text with references to a regular expression's captures
// and to the request, expanded for each request: the replacement of a
// Rewrite, the Location of a Respond. A Template is immutable and safe for
// concurrent use.
//
// In the text, as in nginx:
//
//   - $1 to $9 are the numbered captures of the expression (a single digit:
//     "$10" is $1 followed by "0"), $0 the whole match; ${12} reaches any
//     group. A group that did not take part in the match is empty.
//   - $name and ${name} are the capture named name ((?P<name>...) in the
//     expression), or else one of the request's variables: host (the
//     Host without its port, in lower case), scheme (https on a TLS
//     connection, else http), request_uri (the target as the client sent
//     it, path and query), uri (its path), args (its query, without the
//     "?"), is_args ("?" when there is a query, else empty). A name runs
//     as far as letters, digits and "_" go: ${uri}_x is $uri followed by
//     "_x".
//   - $$ is a "$".
//
// The rest is taken as it is, and must be visible ASCII (no spaces, no
// control characters).
type Template struct {
	src    string
	parts  []part
	groups int // the highest capture referred to, plus one
}

type partKind uint8

const (
	literal partKind = iota
	capture
	variable
)

type part struct {
	kind partKind
	lit  string // literal
	n    int    // capture: the group; variable: which
}

// The request variables a Template may refer to.
const (
	varHost = iota
	varScheme
	varRequestURI
	varURI
	varArgs
	varIsArgs
)

var variables = map[string]int{
	"host":        varHost,
	"scheme":      varScheme,
	"request_uri": varRequestURI,
	"uri":         varURI,
	"args":        varArgs,
	"is_args":     varIsArgs,
}

// VariableNames lists the request variables a Template may refer to.
func VariableNames() []string {
	return []string{"host", "scheme", "request_uri", "uri", "args", "is_args"}
}

// ParseTemplate parses src, whose captures refer to re's groups; with a
// nil re, src may refer to none. An error says what is wrong and where (a
// byte offset into src).
func ParseTemplate(src string, re *regexp.Regexp) (*Template, error) {
	t := &Template{src: src}
	groups := 0
	if re != nil {
		groups = re.NumSubexp()
	}
	var lit []byte
	flush := func() {
		if len(lit) > 0 {
			t.parts = append(t.parts, part{kind: literal, lit: string(lit)})
			lit = lit[:0]
		}
	}
	ref := func(at int, name string, braced bool) error {
		n, err := strconv.Atoi(name)
		switch {
		case err == nil && (len(name) == 1 || (braced && name[0] != '0' && len(name) <= 4)):
			if re == nil {
				return fmt.Errorf("at %d: $%s refers to a capture, and there is no regular expression to capture with", at, name)
			}
			if n > groups {
				return fmt.Errorf("at %d: $%s refers to capture %d, and the expression %q has %d", at, name, n, re.String(), groups)
			}
			flush()
			t.parts = append(t.parts, part{kind: capture, n: n})
			t.groups = max(t.groups, n+1)
			return nil
		case err == nil || name[0] >= '0' && name[0] <= '9':
			return fmt.Errorf("at %d: ${%s} is not a capture: write a group's number as ${1} to ${%d}, without leading zeros", at, name, max(groups, 1))
		}
		if re != nil {
			if i := re.SubexpIndex(name); i > 0 {
				flush()
				t.parts = append(t.parts, part{kind: capture, n: i})
				t.groups = max(t.groups, i+1)
				return nil
			}
		}
		v, ok := variables[name]
		if !ok {
			hint := ""
			for _, known := range VariableNames() {
				if strings.HasPrefix(name, known) && !braced {
					hint = fmt.Sprintf(" (for $%s followed by %q, write ${%s}%s)", known, name[len(known):], known, name[len(known):])
					break
				}
			}
			return fmt.Errorf("at %d: $%s is neither a capture of the expression nor a variable (%s)%s",
				at, name, strings.Join(VariableNames(), ", "), hint)
		}
		flush()
		t.parts = append(t.parts, part{kind: variable, n: v})
		return nil
	}
	for i := 0; i < len(src); {
		c := src[i]
		if c != '$' {
			if c <= ' ' || c >= 0x7f {
				return nil, fmt.Errorf("at %d: %q: only visible ASCII may be written; percent-encode the rest", i, c)
			}
			lit = append(lit, c)
			i++
			continue
		}
		if i+1 == len(src) {
			return nil, fmt.Errorf("at %d: a $ ends the text; write $$ for a $", i)
		}
		switch d := src[i+1]; {
		case d == '$':
			lit = append(lit, '$')
			i += 2
		case d >= '0' && d <= '9':
			if err := ref(i, src[i+1:i+2], false); err != nil {
				return nil, err
			}
			i += 2
		case d == '{':
			end := strings.IndexByte(src[i+2:], '}')
			if end < 0 {
				return nil, fmt.Errorf("at %d: ${ without its }", i)
			}
			name := src[i+2 : i+2+end]
			if !isName(name) && !isDigits(name) {
				return nil, fmt.Errorf("at %d: ${%s}: a name is letters, digits and _, a capture digits", i, name)
			}
			if err := ref(i, name, true); err != nil {
				return nil, err
			}
			i += 3 + end
		case isNameStart(d):
			j := i + 2
			for j < len(src) && isNameByte(src[j]) {
				j++
			}
			if err := ref(i, src[i+1:j], false); err != nil {
				return nil, err
			}
			i = j
		default:
			return nil, fmt.Errorf("at %d: $%c: a $ starts $1, $name or ${name}; write $$ for a $", i, d)
		}
	}
	flush()
	return t, nil
}

func isNameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isNameByte(c byte) bool  { return isNameStart(c) || c >= '0' && c <= '9' }

func isName(s string) bool {
	if s == "" || !isNameStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String returns the text the Template was parsed from.
func (t *Template) String() string { return t.src }

// Literal reports whether the Template refers to nothing: its text is
// what it expands to (with $$ as $).
func (t *Template) Literal() bool {
	for _, p := range t.parts {
		if p.kind != literal {
			return false
		}
	}
	return true
}

// StartsWith reports whether every expansion starts with prefix: the
// Template's text does, before any reference.
func (t *Template) StartsWith(prefix string) bool {
	if len(t.parts) == 0 || t.parts[0].kind != literal {
		return prefix == ""
	}
	return strings.HasPrefix(t.parts[0].lit, prefix)
}

// Append appends the expansion of t for the session's request to dst and
// returns it. subject is the text the expression was matched against and
// match the indexes regexp.FindSubmatchIndex returned (nil when t has no
// expression, or it was not run: captures are then empty).
func (t *Template) Append(dst []byte, s *proxy.Session, subject []byte, match []int) []byte {
	for _, p := range t.parts {
		switch p.kind {
		case literal:
			dst = append(dst, p.lit...)
		case capture:
			if 2*p.n+1 < len(match) {
				if lo, hi := match[2*p.n], match[2*p.n+1]; lo >= 0 && lo <= hi && hi <= len(subject) {
					dst = append(dst, subject[lo:hi]...)
				}
			}
		case variable:
			dst = appendVariable(dst, s, p.n)
		}
	}
	return dst
}

// appendVariable appends the request variable v.
func appendVariable(dst []byte, s *proxy.Session, v int) []byte {
	req := &s.Request
	target := req.Target()
	path, query, hasQuery := bytes.Cut(target, []byte("?"))
	switch v {
	case varHost:
		h := hostOnly(req.Header.Get("Host"))
		if n := len(h); n > 0 && h[n-1] == '.' {
			h = h[:n-1]
		}
		for _, c := range h {
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
		}
	case varScheme:
		if s.TLS != nil {
			return append(dst, "https"...)
		}
		return append(dst, "http"...)
	case varRequestURI:
		return append(dst, target...)
	case varURI:
		return append(dst, path...)
	case varArgs:
		return append(dst, query...)
	case varIsArgs:
		if hasQuery && len(query) > 0 {
			return append(dst, '?')
		}
	}
	return dst
}
