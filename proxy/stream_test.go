package proxy

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h1"
)

// decodeChunked runs a chunkDec over in, written in pieces of at most
// step bytes, as the Session's writes come.
func decodeChunked(in []byte, step int) (body []byte, trailers string, rest []byte, done bool, err error) {
	sc := &streamConn{}
	for len(in) > 0 && !sc.chunk.done {
		n := min(step, len(in))
		var left []byte
		left, err = sc.chunk.decode(in[:n], sc)
		body = append(body, sc.pay...)
		sc.pay, sc.own = nil, sc.own[:0]
		if err != nil {
			return body, "", nil, false, err
		}
		in = append(left, in[n:]...)
	}
	for _, f := range sc.chunk.trailers {
		trailers += f.Name + "=" + f.Value + ";"
	}
	return body, trailers, in, sc.chunk.done, nil
}

func TestChunkDecoder(t *testing.T) {
	tests := []struct {
		name, in, body, trailers, rest string
		bad                            bool
	}{
		{"one chunk", "5\r\nhello\r\n0\r\n\r\n", "hello", "", "", false},
		{"extensions and trailers", "3;a=b\r\nhel\r\n2\r\nlo\r\n0\r\nGrpc-Status: 0\r\nX-A: b c \r\n\r\n", "hello", "grpc-status=0;x-a=b c;", "", false},
		{"bytes after the end", "0\r\n\r\nnext", "", "", "next", false},
		{"a connection field in the trailers", "0\r\nConnection: close\r\n\r\n", "", "", "", false},
		{"bare LF", "2\nhi\n0\n\n", "hi", "", "", false},
		{"bad size", "zz\r\n", "", "", "", true},
		{"data longer than its size", "2\r\nhello\r\n", "", "", "", true},
		{"trailer without colon", "0\r\nbad\r\n\r\n", "", "", "", true},
	}
	for _, tt := range tests {
		for _, step := range []int{1, 3, 1 << 20} {
			body, trailers, rest, done, err := decodeChunked([]byte(tt.in), step)
			if tt.bad {
				if err == nil {
					t.Errorf("%s (step %d): no error", tt.name, step)
				}
				continue
			}
			if err != nil || !done || string(body) != tt.body || trailers != tt.trailers || string(rest) != tt.rest {
				t.Errorf("%s (step %d): body %q trailers %q rest %q done %v err %v", tt.name, step, body, trailers, rest, done, err)
			}
		}
	}
}

// FuzzChunkDecoder: whatever the bytes and however they are split, the
// decoder does not panic, and it decodes the same in one piece as byte by
// byte.
func FuzzChunkDecoder(f *testing.F) {
	for _, s := range []string{"5\r\nhello\r\n0\r\n\r\n", "3;x\r\nabc\r\n0\r\nA: b\r\n\r\n", "0\r\n\r\n", "ffffffffffffffff\r\n", "1\r\n"} {
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, in []byte, step int) {
		if step < 1 {
			step = 1
		}
		b1, t1, r1, d1, e1 := decodeChunked(in, 1<<30)
		b2, t2, r2, d2, e2 := decodeChunked(in, step)
		if (e1 == nil) != (e2 == nil) {
			return // a line too long may be seen in one split and not the other
		}
		if e1 == nil && (!bytes.Equal(b1, b2) || t1 != t2 || d1 != d2 || (d1 && !bytes.Equal(r1, r2))) {
			t.Fatalf("one piece: %q %q %q %v; steps of %d: %q %q %q %v", b1, t1, r1, d1, step, b2, t2, r2, d2)
		}
	})
}

// FuzzH2RequestMapping: whatever fields an HTTP/2 request carries, the
// HTTP/1.1 head made of them is refused, or parses back to exactly the
// request line and fields it was made of: no field can smuggle another
// head, or another field, upstream.
func FuzzH2RequestMapping(f *testing.F) {
	f.Add([]byte(":method\x00GET\x00:path\x00/a?b\x00:authority\x00example.com\x00cookie\x00a=1\x00cookie\x00b=2"), true)
	f.Add([]byte(":method\x00POST\x00:path\x00/\x00:authority\x00x\x00content-length\x005\x00x-a\x00b\r\nx-b: c"), false)
	f.Add([]byte(":method\x00GET\x00:path\x00/ HTTP/1.1\r\nHost: evil\r\n\r\nGET /\x00:authority\x00x"), true)
	f.Add([]byte(":method\x00CONNECT\x00:authority\x00example.com:443"), false)
	f.Fuzz(func(t *testing.T, data []byte, noBody bool) {
		parts := bytes.Split(data, []byte{0})
		var fields []hpack.HeaderField
		for i := 0; i+1 < len(parts); i += 2 {
			fields = append(fields, hpack.HeaderField{Name: string(parts[i]), Value: string(parts[i+1])})
		}
		// A body that arrived whole goes with its length: every other
		// input takes that path too.
		known := int64(-1)
		if len(data)%2 == 1 {
			known = int64(len(data))
		}
		var req h1.Request
		if _, _, err := requestFromH2(&req, fields, noBody, known); err != nil {
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

// A value equal to the one the last response had at its position reuses
// that string; others, and long ones, are copies.
func TestLastValues(t *testing.T) {
	long := strings.Repeat("v", maxKeptValue+1)
	tests := []struct {
		name     string
		i        int
		before   string // kept at i first ("" for nothing)
		value    string
		wantSame bool // the string kept before comes back
		wantKept bool // value is kept at i afterwards
	}{
		{"same value", 2, "text/plain", "text/plain", true, true},
		{"changed value", 2, "text/plain", "text/html", false, true},
		{"nothing kept yet", 0, "", "nginx", false, true},
		{"long value", 3, "", long, false, false},
		{"beyond the kept positions", 16, "", "x", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lv lastValues
			var kept string
			if tt.before != "" {
				kept = lv.value(tt.i, []byte(tt.before))
			}
			got := lv.value(tt.i, []byte(tt.value))
			if got != tt.value {
				t.Fatalf("value = %q, want %q", got, tt.value)
			}
			if same := kept != "" && unsafe.StringData(got) == unsafe.StringData(kept); same != tt.wantSame {
				t.Errorf("reused the kept string: %v, want %v", same, tt.wantSame)
			}
			if k := tt.i < len(lv) && lv[tt.i] == tt.value; k != tt.wantKept {
				t.Errorf("kept: %v, want %v", k, tt.wantKept)
			}
		})
	}
}
