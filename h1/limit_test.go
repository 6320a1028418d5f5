package h1

import (
	"io"
	"strings"
	"testing"
)

// TestBodyLimit checks Body.Limit: the data (never the chunked framing)
// counts against the bound, a Content-Length over it fails before any
// byte, and a chunked body fails at the size line of the chunk that would
// pass it, after returning every byte before that line and not the line.
func TestBodyLimit(t *testing.T) {
	tests := []struct {
		name   string
		f      Framing
		wire   string
		limit  int64
		decode bool
		want   string // the segments returned, concatenated
		over   bool   // ErrBodyTooLarge at the end, not io.EOF
	}{
		{"length under", Framing{Kind: Length, Length: 5}, "hello", 6, false, "hello", false},
		{"length at", Framing{Kind: Length, Length: 5}, "hello", 5, false, "hello", false},
		{"length over", Framing{Kind: Length, Length: 5}, "hello", 4, false, "", true},
		{"length zero limit, empty body", Framing{Kind: Length, Length: 0}, "", 0, false, "", false},
		{"chunked at", Framing{Kind: Chunked}, "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", 5, false,
			"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", false},
		{"chunked over at the second chunk", Framing{Kind: Chunked}, "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n", 5, false,
			"3\r\nabc\r\n", true},
		{"chunked over at the first chunk", Framing{Kind: Chunked}, "6\r\nabcdef\r\n0\r\n\r\n", 5, false, "", true},
		{"chunked: framing and trailers do not count", Framing{Kind: Chunked},
			"1;ext=long-extension\r\na\r\n0\r\nX-Trailer: a long trailer value\r\n\r\n", 1, false,
			"1;ext=long-extension\r\na\r\n0\r\nX-Trailer: a long trailer value\r\n\r\n", false},
		{"chunked decoded over", Framing{Kind: Chunked}, "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n", 4, true, "abc", true},
		{"chunked zero limit", Framing{Kind: Chunked}, "0\r\n\r\n", 0, false, "0\r\n\r\n", false},
		{"until close at", Framing{Kind: UntilClose}, "hello", 5, false, "hello", false},
		{"until close over", Framing{Kind: UntilClose}, "hello!", 5, false, "hello", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A reader that hands out a byte at a time, so that every
			// segment boundary is exercised.
			r := NewReader(io.LimitReader(&oneByte{s: tt.wire}, int64(len(tt.wire))))
			var b Body
			b.Init(r, tt.f, tt.decode, 1<<10)
			b.Limit(tt.limit)
			b.Limit(tt.limit + 100) // a second, higher bound changes nothing
			var got strings.Builder
			var err error
			for {
				var seg []byte
				seg, err = b.Next()
				got.Write(seg)
				if err != nil {
					break
				}
			}
			if got.String() != tt.want {
				t.Errorf("segments %q, want %q", got.String(), tt.want)
			}
			switch {
			case tt.over && err != ErrBodyTooLarge:
				t.Errorf("ended with %v, want ErrBodyTooLarge", err)
			case !tt.over && err != io.EOF:
				t.Errorf("ended with %v, want io.EOF", err)
			}
			if tt.over && StatusOf(err) != 413 {
				t.Errorf("StatusOf(%v) = %d, want 413", err, StatusOf(err))
			}
			if _, again := b.Next(); again != err {
				t.Errorf("Next after the end: %v, want %v again", again, err)
			}
		})
	}
}

type oneByte struct{ s string }

func (o *oneByte) Read(p []byte) (int, error) {
	if o.s == "" {
		return 0, io.EOF
	}
	p[0] = o.s[0]
	o.s = o.s[1:]
	return 1, nil
}
