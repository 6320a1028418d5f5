package proxy

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h1"
)

// FuzzH2RequestMapping: whatever fields an HTTP/2 request carries, the
// HTTP/1.1 head made of them is refused, or parses back to exactly the
// request line and fields it was made of: no field can smuggle another
// head, or another field, upstream.
func FuzzH2RequestMapping(f *testing.F) {
	f.Add([]byte(":method\x00GET\x00:path\x00/a?b\x00:authority\x00example.com\x00cookie\x00a=1\x00cookie\x00b=2"))
	f.Add([]byte(":method\x00POST\x00:path\x00/\x00:authority\x00x\x00content-length\x005\x00x-a\x00b\r\nx-b: c"))
	f.Add([]byte(":method\x00GET\x00:path\x00/ HTTP/1.1\r\nHost: evil\r\n\r\nGET /\x00:authority\x00x"))
	f.Add([]byte(":method\x00CONNECT\x00:authority\x00example.com:443"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parts := bytes.Split(data, []byte{0})
		var fields []hpack.HeaderField
		for i := 0; i+1 < len(parts); i += 2 {
			fields = append(fields, hpack.HeaderField{Name: string(parts[i]), Value: string(parts[i+1])})
		}
		var req h1.Request
		if err := requestFromH2(&req, fields); err != nil {
			return
		}
		head := h1.AppendRequest(nil, &req)
		var back h1.Request
		if err := h1.ParseRequest(&back, head, 10000); err != nil {
			t.Fatalf("the head made does not parse: %v\n%q", err, head)
		}
		if back.Method() != req.Method() || !bytes.Equal(back.Target(), req.Target()) || back.Header.Len() != req.Header.Len() {
			t.Fatalf("parsed back as another request:\n%q\n%s %s %d fields, made %d", head, back.Method(), back.Target(), back.Header.Len(), req.Header.Len())
		}
		for i := 0; i < req.Header.Len(); i++ {
			if !bytes.Equal(back.Header.Name(i), req.Header.Name(i)) ||
				!bytes.Equal(back.Header.Value(i), bytes.Trim(req.Header.Value(i), " \t")) {
				t.Fatalf("field %d parsed back as %q: %q, made %q: %q", i, back.Header.Name(i), back.Header.Value(i), req.Header.Name(i), req.Header.Value(i))
			}
		}
	})
}

// A value seen lately comes back as the string made of it then; others,
// and long ones, are copies.
func TestInterned(t *testing.T) {
	long := strings.Repeat("v", maxKeptValue+1)
	tests := []struct {
		name     string
		before   string // seen first ("" for nothing)
		value    string
		wantSame bool // the string made before comes back
	}{
		{"same value", "text/plain", "text/plain", true},
		{"another value", "text/plain", "text/html", false},
		{"nothing seen yet", "", "nginx", false},
		{"long value", long, long, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen interned
			var kept string
			if tt.before != "" {
				kept = seen.of([]byte(tt.before))
			}
			got := seen.of([]byte(tt.value))
			if got != tt.value {
				t.Fatalf("of = %q, want %q", got, tt.value)
			}
			if same := kept != "" && unsafe.StringData(got) == unsafe.StringData(kept); same != tt.wantSame {
				t.Errorf("reused the string made before: %v, want %v", same, tt.wantSame)
			}
			if n := testing.AllocsPerRun(10, func() { seen.of([]byte(tt.value)) }); tt.value != long && n != 0 {
				t.Errorf("%v allocations for a value seen just before", n)
			}
		})
	}
}
