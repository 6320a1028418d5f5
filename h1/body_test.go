package h1

import (
	"io"
	"testing"
)

// TestDecodeReady checks that in decode mode Ready looks past the framing
// between chunks when the next chunk's data (or the body's end) is
// buffered, so that a reader of a chunked body that arrived in one read
// learns it need not wait, and says no as soon as Next would read.
func TestDecodeReady(t *testing.T) {
	tests := []struct {
		in    string
		ready []bool // Ready before each Next, until the end
	}{
		{"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n", []bool{true, true, true}},
		{"5\r\nhello\r\n3\r\n", []bool{true, false}},             // "3\r\n" with no data after it
		{"5\r\nhello\r\n0\r\n", []bool{true, false}},             // the end, without the empty trailer line
		{"5\r\nhello\r\n0\r\nA: b\r\n\r\n", []bool{true, false}}, // trailers: not looked at
		{"5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n", []bool{true, true, true}},
		{"5\r\nhello\r\nzz\r\nabc", []bool{true, false}}, // a bad size line: no
		{"5\r\nhello\n3\r\nabc", []bool{true, false}},    // a bare LF: no
	}
	for _, tt := range tests {
		src := &trickle{in: []byte(tt.in), step: len(tt.in)}
		var b Body
		b.Init(NewReader(src), Framing{Kind: Chunked}, true, 1024)
		for i, want := range tt.ready {
			if i > 0 { // the first Ready comes before anything was read
				if got := b.Ready(); got != want {
					t.Errorf("%q: Ready before Next %d = %v, want %v", tt.in, i, got, want)
				}
			}
			reads := src.reads
			_, err := b.Next()
			if i > 0 && want && src.reads != reads {
				t.Errorf("%q: Next %d read after Ready", tt.in, i)
			}
			if err != nil {
				if err != io.EOF && want {
					t.Errorf("%q: Next %d: %v", tt.in, i, err)
				}
				break
			}
		}
	}
}
