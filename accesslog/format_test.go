package accesslog

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		format string
		parts  []part // nil: an error
		err    string // part of the error, with its offset
	}{
		{format: "$client $method $target $status $duration", parts: []part{
			{"", fClient, true}, {" ", fMethod, true}, {" ", fTarget, true}, {" ", fStatus, true}, {" ", fDuration, true}}},
		{format: `$remote_addr "$request" $upstream_addr`, parts: []part{
			{"", fClient, true}, {` "`, fRequest, true}, {`" `, fUpstream, true}}},
		{format: "${status}ok", parts: []part{{"", fStatus, true}, {"ok", 0, false}}},
		{format: "cost $$${duration}", parts: []part{{"cost $", fDuration, true}}},
		{format: "$time\t$msg", parts: []part{{"", fTime, true}, {"\t", fMsg, true}}},
		{format: "plain text", parts: []part{{"plain text", 0, false}}},
		{format: "", parts: []part{{"", 0, false}}},
		{format: "$static $compressed $rate_limited", parts: []part{{"", fStatic, true}, {" ", fCompressed, true}, {" ", fRateLimited, true}}},
		{format: "$client $clinet", err: "at byte 8: unknown field $clinet (did you mean $client?)"},
		{format: "$nosuchthing", err: "at byte 0: unknown field $nosuchthing;"},
		{format: "a $ b", err: "at byte 2: a $ must start a field name"},
		{format: "a $", err: "at byte 2: a $ must start a field name"},
		{format: "${status", err: "at byte 0: ${status has no closing }"},
		{format: "${}", err: "at byte 0: a $ must start a field name"},
		{format: "$status\n$client", err: "at byte 7: control character 0x0a"},
		{format: "$Status", err: "unknown field $Status (did you mean $status?)"},
	}
	for _, tt := range tests {
		f, err := Parse(tt.format)
		if tt.parts == nil {
			var se *SyntaxError
			if err == nil || !errors.As(err, &se) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%q) = %v, want an error with %q", tt.format, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.format, err)
			continue
		}
		if !equalParts(f.parts, tt.parts) || f.String() != tt.format {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.format, f.parts, tt.parts)
		}
	}
}

func equalParts(a, b []part) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestNames: every attribute field's key maps back to it, every nginx
// name to a field, and the named formats parse.
func TestNames(t *testing.T) {
	for f, k := range keys {
		if k == "" {
			t.Errorf("field %d has no key", f)
			continue
		}
		if got, ok := attrField(k); !ok || got != field(f) {
			t.Errorf("attrField(%q) = %d, %v; want %d", k, got, ok, f)
		}
		if names[k] != field(f) {
			t.Errorf("names[%q] = %d, want %d", k, names[k], f)
		}
	}
	if len(names) != int(numFields)+len(nginxNames) {
		t.Errorf("%d names for %d fields and %d nginx names: a name is listed twice", len(names), numFields, len(nginxNames))
	}
	if n := Names(); len(n) != len(names) || n[0] != "aborted" {
		t.Errorf("Names() = %v", n)
	}
	for name, format := range named {
		if _, err := Parse(format); err != nil {
			t.Errorf("named format %s: %v", name, err)
		}
	}
}
