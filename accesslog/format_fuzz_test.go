package accesslog

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// FuzzParse: any format parses or is refused with a SyntaxError within it;
// one that parses writes a record as one line, and parses again from its
// String to the same parts.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"$client $method $target $status $duration",
		`$remote_addr - - [$time_local] "$request" $status $bytes_sent "$http_referer" "$http_user_agent"`,
		"${status}x$$y", "$", "${", "${}", "$$$", "a $ b", "$clinet", "\t$msg\n", "$time$msec$level", "${request", "é$status",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fm, err := Parse(s)
		if err != nil {
			se, ok := err.(*SyntaxError)
			if !ok || se.Offset < 0 || se.Offset >= len(s) {
				t.Fatalf("Parse(%q): %v, not a SyntaxError within the format", s, err)
			}
			return
		}
		var buf bytes.Buffer
		if err := NewHandler(&buf, fm, nil).Handle(context.Background(), record()); err != nil {
			t.Fatal(err)
		}
		if l := buf.String(); strings.Count(l, "\n") != 1 || !strings.HasSuffix(l, "\n") {
			t.Fatalf("Parse(%q) writes %q, not one line", s, l)
		}
		again, err := Parse(fm.String())
		if err != nil || !equalParts(again.parts, fm.parts) {
			t.Fatalf("Parse(%q) reads back from its String as %+v, %v; want %+v", s, again, err, fm.parts)
		}
	})
}
