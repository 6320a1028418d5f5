package h1

import (
	"io"
	"strings"
	"testing"
)

// pieces hands out one read's worth at a time: the pieces given, then
// io.EOF.
type pieces struct{ rest []string }

func (t *pieces) Read(p []byte) (int, error) {
	if len(t.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, t.rest[0])
	if t.rest[0] = t.rest[0][n:]; t.rest[0] == "" {
		t.rest = t.rest[1:]
	}
	return n, nil
}

// A head that arrives in pieces, stashed between reads as a connection
// waiting for the rest does, holds a buffer of its own size between reads
// and comes out byte for byte, however it was cut.
func TestStashBetweenReads(t *testing.T) {
	big := "GET /" + strings.Repeat("a", 5000) + " HTTP/1.1\r\nHost: x\r\n\r\n"
	tests := []struct {
		name   string
		pieces []string
		// held is the largest buffer a stash may hold after each read
		// but the last.
		held int
	}{
		{"byte by byte", strings.Split("GET / HTTP/1.1\r\nHost: x\r\n\r\n", ""), minStash},
		{"two pieces", []string{"GET / HTTP/1.1\r\nHo", "st: x\r\n\r\n"}, minStash},
		{"a line of 600 bytes", []string{"GET /" + strings.Repeat("b", 600), " HTTP/1.1\r\nHost: x\r\n\r\n"}, 1 << 10},
		{"over a stash: kept in the read buffer", []string{big[:2500], big[2500:]}, minBuf},
		{"over a read buffer: grown", []string{big[:2000], big[2000:4090], big[4090:]}, 2 * minBuf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := strings.Join(tt.pieces, "")
			src := &pieces{rest: append([]string(nil), tt.pieces...)}
			r := NewReader(src)
			for !r.HasHead(true) {
				if err := r.FillHead(64 << 10); err != nil {
					t.Fatalf("after %d bytes: %v", r.Buffered(), err)
				}
				if r.HasHead(true) {
					break
				}
				r.Stash()
				if len(r.buf) > tt.held {
					t.Fatalf("%d bytes buffered in a %d-byte buffer, want at most %d", r.Buffered(), len(r.buf), tt.held)
				}
				if got := string(r.Peek()); !strings.HasPrefix(want, got) {
					t.Fatalf("stashed %q, not the start of the head", got)
				}
			}
			head, err := r.ReadHead(64<<10, true)
			if err != nil || string(head) != want {
				t.Fatalf("ReadHead = %q, %v; want %q", head, err, want)
			}
			if r.N != int64(len(want)) {
				t.Fatalf("N = %d, want %d", r.N, len(want))
			}
		})
	}
}

// A stash past the head limit still ends in ReadHead's refusal, never in a
// read into a full buffer.
func TestStashedHeadTooLarge(t *testing.T) {
	line := "GET /" + strings.Repeat("a", 700) + " HTTP/1.1\r\n"
	src := &pieces{rest: strings.Split(line+"X: y\r\n", "")}
	r := NewReader(src)
	const max = 512
	for r.Buffered() < max {
		if err := r.FillHead(max); err != nil {
			t.Fatal(err)
		}
		r.Stash()
	}
	if _, err := r.ReadHead(max, true); err != ErrURITooLong {
		t.Fatalf("ReadHead = %v, want ErrURITooLong", err)
	}
}

// The pools hand out exactly the sizes of their classes.
func TestBufClasses(t *testing.T) {
	for _, n := range []int{1, 255, 256, 257, 2048, 2049, 4096, 4097, 65536} {
		p := getBuf(n)
		size := len(*p)
		if size < n || (size > minStash && size/2 >= n) {
			t.Errorf("getBuf(%d) gave %d bytes", n, size)
		}
		putBuf(p)
	}
	if p := getBuf(65537); len(*p) != 65537 {
		t.Errorf("an unpooled size came back as %d bytes", len(*p))
	}
}
