// Package accesslog writes access log lines in a format of named fields,
// as nginx's log_format does: '$client $method $target $status
// $duration' writes "192.0.2.7 GET /api/users 200 0.004213". It is a
// log/slog handler (NewHandler) for the records the proxy writes one per
// request (proxy.Server.AccessLog): each field is an attribute of the
// record by its name, so the fields are those of the JSON and text lines,
// and the notes phases add (Session.Note). Where nginx has a variable for
// the same value, its name works too ($remote_addr for $client).
//
// A Format is parsed once (Parse); writing a line takes no allocation of
// its own.
package accesslog

import (
	"fmt"
	"slices"
	"strings"
)

// field is one field a format may name.
type field uint8

// The fields. Those up to lastAttr are attributes of the record, by the
// key in keys; the rest are made from the record itself (its time, level
// and message) or from other fields (request, peer's fallback).
const (
	fClient field = iota
	fPeer
	fMethod
	fHost
	fTarget
	fStatus
	fBytesIn
	fBytesOut
	fDuration
	fProtocol
	fRequestID
	fRoute
	fUpstreamName
	fUpstream
	fUpstreamStatus
	fReused
	fTries
	fStaleResends
	fError
	fAborted
	fTLS
	fSNI
	fUserAgent
	fReferer
	// Notes phases add (Session.Note).
	fAccess
	fBodyLimit
	fCompressed
	fRateLimited
	fRateLimitStore
	fStatic
	fStripped
	fRewritten
	fUser
	fBasicAuth
	fForwardAuth
	fIdempotency
	fCache
	lastAttr = fCache
)

const (
	fTime field = lastAttr + 1 + iota
	fTimeISO8601
	fTimeLocal
	fMsec
	fLevel
	fMsg
	fRequest

	numFields
)

// keys are the attribute keys of the record's fields, as the JSON line
// names them.
var keys = [lastAttr + 1]string{
	fClient: "client", fPeer: "peer", fMethod: "method", fHost: "host", fTarget: "target",
	fStatus: "status", fBytesIn: "bytes_in", fBytesOut: "bytes_out", fDuration: "duration",
	fProtocol: "protocol", fRequestID: "request_id", fRoute: "route", fUpstreamName: "upstream_name",
	fUpstream: "upstream", fUpstreamStatus: "upstream_status", fReused: "reused", fTries: "tries",
	fStaleResends: "stale_resends", fError: "error", fAborted: "aborted", fTLS: "tls", fSNI: "sni",
	fUserAgent: "user_agent", fReferer: "referer",
	fAccess: "access", fBodyLimit: "body_limit", fCompressed: "compressed", fRateLimited: "rate_limited",
	fRateLimitStore: "rate_limit_store", fStatic: "static", fStripped: "stripped",
	fRewritten: "rewritten", fUser: "user", fBasicAuth: "basic_auth", fForwardAuth: "forward_auth",
	fIdempotency: "idempotency", fCache: "cache",
}

// names maps every name a format may use to its field: the JSON line's
// keys, the record's own (time, level, msg), those made from others, and
// nginx's variables for the same values.
var names = func() map[string]field {
	m := make(map[string]field, numFields+16)
	for f, k := range keys {
		m[k] = field(f)
	}
	m["time"], m["level"], m["msg"], m["request"] = fTime, fLevel, fMsg, fRequest
	m["time_iso8601"], m["time_local"], m["msec"] = fTimeISO8601, fTimeLocal, fMsec
	for alias, f := range nginxNames {
		m[alias] = f
	}
	return m
}()

// nginxNames are nginx's variables for values sluice logs under another
// name, written the same way.
var nginxNames = map[string]field{
	"remote_addr":        fClient,
	"realip_remote_addr": fPeer,
	"request_method":     fMethod,
	"http_host":          fHost,
	"request_uri":        fTarget,
	"server_protocol":    fProtocol,
	"bytes_sent":         fBytesOut,
	"request_time":       fDuration,
	"upstream_addr":      fUpstream,
	"ssl_server_name":    fSNI,
	"http_user_agent":    fUserAgent,
	"http_referer":       fReferer,
	"remote_user":        fUser,
}

// Names returns every field name a format may use, sorted.
func Names() []string {
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	slices.Sort(list)
	return list
}

// Named formats, by the name the config gives in place of a format.
var named = map[string]string{
	// nginx's combined, as log analyzers read it. $bytes_sent counts the
	// response's head too (nginx's combined has the body's alone), and
	// the user (nginx's $remote_user) is "-".
	"combined": `$remote_addr - - [$time_local] "$request" $status $bytes_sent "$http_referer" "$http_user_agent"`,
}

// Named returns the format a name stands for ("combined": nginx's), and
// whether there is one.
func Named(name string) (string, bool) {
	f, ok := named[name]
	return f, ok
}

// part is a piece of a line: literal text, then a field (or none).
type part struct {
	lit   string
	field field
	has   bool
}

// Format is a parsed format: what a line holds, in order. It is
// immutable, and safe for concurrent use.
type Format struct {
	text    string
	parts   []part
	collect uint64 // a bit per attribute a line needs: the fields named, and those they are made from
}

// String returns the format as it was written.
func (f *Format) String() string { return f.text }

// SyntaxError is Parse's error: what is wrong, and at which byte of the
// format.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("at byte %d: %s", e.Offset, e.Msg) }

// Parse parses a format: text, with fields named as $name or ${name} (the
// braces for a field followed by a letter, digit or underscore), and $$
// for a dollar sign. Names are those of Names; any other is an error, and
// so is a control character other than a tab (a line is one line).
func Parse(format string) (*Format, error) {
	f := &Format{text: format}
	var lit strings.Builder
	for i := 0; i < len(format); {
		c := format[i]
		if c < 0x20 && c != '\t' || c == 0x7f {
			return nil, &SyntaxError{i, fmt.Sprintf("control character 0x%02x: a line is one line", c)}
		}
		if c != '$' {
			lit.WriteByte(c)
			i++
			continue
		}
		start := i
		i++
		if i < len(format) && format[i] == '$' {
			lit.WriteByte('$')
			i++
			continue
		}
		braced := i < len(format) && format[i] == '{'
		if braced {
			i++
		}
		j := i
		for j < len(format) && isNameByte(format[j]) {
			j++
		}
		name := format[i:j]
		if name == "" {
			return nil, &SyntaxError{start, "a $ must start a field name ($status, ${status}); write $$ for a dollar sign"}
		}
		if braced {
			if j >= len(format) || format[j] != '}' {
				return nil, &SyntaxError{start, "${" + name + " has no closing }"}
			}
			j++
		}
		fd, ok := names[name]
		if !ok {
			return nil, &SyntaxError{start, "unknown field $" + name + suggest(name) + "; the fields are the JSON line's (client, method, target, status, duration...) and nginx's names for them (remote_addr, request_uri...)"}
		}
		f.parts = append(f.parts, part{lit: lit.String(), field: fd, has: true})
		f.collect |= 1 << fd
		lit.Reset()
		i = j
	}
	if lit.Len() > 0 || len(f.parts) == 0 {
		f.parts = append(f.parts, part{lit: lit.String()})
	}
	if f.collect&(1<<fPeer|1<<fRequest) != 0 {
		// $peer falls back to the client; $request is made of three.
		f.collect |= 1<<fClient | 1<<fMethod | 1<<fTarget | 1<<fProtocol
	}
	return f, nil
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// suggest names the field closest to name when it looks like a typo of
// it: " (did you mean $client?)".
func suggest(name string) string {
	best, bestDist := "", 3
	for n := range names {
		if d := distance(strings.ToLower(name), n); d < bestDist || d == bestDist && n < best {
			best, bestDist = n, d
		}
	}
	if best == "" || bestDist > 2 || bestDist*2 > len(best) {
		return ""
	}
	return " (did you mean $" + best + "?)"
}

// distance is the Levenshtein distance between a and b, in bytes, or 3
// when that is more than 2 (all suggest needs).
func distance(a, b string) int {
	if len(a) > len(b)+2 || len(b) > len(a)+2 {
		return 3
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], 3)
}
