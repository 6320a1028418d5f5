package h3

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go/quicvarint"
)

// FuzzParseSettings: any payload parses or fails with a ConnError, never
// a panic; what parses again after appendSettings reads the same.
func FuzzParseSettings(f *testing.F) {
	f.Add(appendSettings(nil, 65536)[2:])
	f.Add([]byte{0x06, 0x40, 0x64, 0x06, 0x00})
	f.Add([]byte{0x02, 0x01})
	f.Fuzz(func(t *testing.T, p []byte) {
		s, err := parseSettings(p)
		if err != nil {
			var ce *ConnError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		again, err := parseSettings(appendSettings(nil, s.maxFieldSection)[2:])
		if err != nil || again != s {
			t.Fatalf("%+v -> %+v, %v", s, again, err)
		}
	})
}

// FuzzFrameHeader: peekFrameHeader and readFrameHeader agree on every
// input, and a header appended reads back.
func FuzzFrameHeader(f *testing.F) {
	f.Add(appendFrameHeader(nil, frameHeaders, 12))
	f.Add([]byte{0xc0})
	f.Add([]byte{0x40, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		a, errA := peekFrameHeader(bufio.NewReader(bytes.NewReader(p)))
		b, errB := readFrameHeader(bufio.NewReader(bytes.NewReader(p)))
		if (errA == nil) != (errB == nil) || errA == nil && a != b {
			t.Fatalf("peek %+v %v, read %+v %v", a, errA, b, errB)
		}
		if errA != nil {
			return
		}
		c, err := peekFrameHeader(bufio.NewReader(bytes.NewReader(appendFrameHeader(nil, a.typ, int(min(a.len, 1<<40))))))
		if err != nil || c.typ != a.typ {
			t.Fatalf("round trip %+v -> %+v %v", a, c, err)
		}
	})
}

// FuzzEncoderStream: a peer's encoder stream is accepted only when it
// sets the capacity to 0.
func FuzzEncoderStream(f *testing.F) {
	f.Add([]byte{0x20})
	f.Add([]byte{0x3f, 0xe1, 0x1f})
	f.Add([]byte{0x41, 'a', 0x01, 'b'})
	f.Fuzz(func(t *testing.T, p []byte) {
		err := checkEncoderStream(bufio.NewReader(bytes.NewReader(p)))
		if err == io.EOF {
			for _, b := range p {
				if b != 0x20 {
					t.Fatalf("accepted %x", p)
				}
			}
		}
	})
}

// FuzzRequestFields: a field section decodes and is checked without a
// panic; one that passes has exactly one :method.
func FuzzRequestFields(f *testing.F) {
	var b bytes.Buffer
	enc := qpack.NewEncoder(&b)
	for _, hf := range []qpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "a"}, {Name: ":path", Value: "/"}, {Name: "content-length", Value: "3"}} {
		enc.WriteField(hf)
	}
	f.Add(b.Bytes())
	f.Add([]byte{0x00, 0x00, 0xd1})
	f.Add(quicvarint.Append([]byte{0x00, 0x00}, 0x50))
	f.Fuzz(func(t *testing.T, block []byte) {
		fields, err := decodeFields(nil, block, 4096)
		if err != nil {
			return
		}
		if _, err := checkRequest(fields); err != nil {
			return
		}
		n := 0
		for _, hf := range fields {
			if hf.Name == ":method" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d :method fields passed", n)
		}
	})
}
