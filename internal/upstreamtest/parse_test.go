package upstreamtest

import (
	"bufio"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll parses the requests in in, one after another, as the server
// would, until the input ends or a request fails. It returns the requests
// read whole, and the error that stopped it (nil at a clean end).
func readAll(r io.Reader) ([]Request, error) {
	br := bufio.NewReaderSize(r, 16) // small, so lines span buffer refills
	var reqs []Request
	for {
		if _, err := br.Peek(1); err == io.EOF {
			return reqs, nil
		}
		req, fr, err := readHead(br)
		if err != nil {
			return reqs, err
		}
		body := newBodyReader(br, req, fr, func() {})
		if _, err := io.Copy(io.Discard, body); err != nil {
			return reqs, err
		}
		reqs = append(reqs, *req)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		decoded string // of the only request
		err     error  // nil, ErrMalformed or io.ErrUnexpectedEOF
	}{
		{"no body", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "", nil},
		{"LF line ends", "GET / HTTP/1.1\nHost: x\n\n", "", nil},
		{"leading empty line", "\r\nGET / HTTP/1.0\r\n\r\n", "", nil},
		{"content-length", "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", "abc", nil},
		{"chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc", nil},
		{"chunked after gzip", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n", "", nil},
		{"chunk extension with BWS", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1 ; a=\"b\"\r\nx\r\n0\r\n\r\n", "x", nil},
		{"obs-text value", "GET / HTTP/1.1\r\nX: caf\xc3\xa9\r\n\r\n", "", nil},

		{"no colon", "GET / HTTP/1.1\r\nBadHeader\r\n\r\n", "", ErrMalformed},
		{"space before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", "", ErrMalformed},
		{"obs-fold", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", "", ErrMalformed},
		{"bare CR", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", "", ErrMalformed},
		{"control in value", "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", "", ErrMalformed},
		{"two spaces in request line", "GET  / HTTP/1.1\r\n\r\n", "", ErrMalformed},
		{"HTTP/2 request line", "GET / HTTP/2.0\r\n\r\n", "", ErrMalformed},
		{"no version", "GET /\r\n\r\n", "", ErrMalformed},
		{"TE and CL", "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "", ErrMalformed},
		{"two CLs", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na", "", ErrMalformed},
		{"CL list", "POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\na", "", ErrMalformed},
		{"CL sign", "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\na", "", ErrMalformed},
		{"CL overflow", "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", "", ErrMalformed},
		{"chunked not final", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", "", ErrMalformed},
		{"chunked twice", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", "", ErrMalformed},
		{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "", ErrMalformed},
		{"chunk size not hex", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nx\r\n", "", ErrMalformed},
		{"chunk size LF only", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\nx\r\n0\r\n\r\n", "", ErrMalformed},
		{"chunk data too long", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n0\r\n\r\n", "", ErrMalformed},
		{"chunk size overflow", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", "", ErrMalformed},
		{"space without extension", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1 \r\nx\r\n0\r\n\r\n", "", ErrMalformed},

		{"head cut short", "GET / HTTP/1.1\r\nHost: x\r\n", "", io.ErrUnexpectedEOF},
		{"body cut short", "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nab", "", io.ErrUnexpectedEOF},
		{"chunked cut short", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", "", io.ErrUnexpectedEOF},
		{"trailer cut short", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: v\r\n", "", io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := readAll(strings.NewReader(tt.in))
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tt.err)
			}
			if tt.err != nil {
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			r := reqs[0]
			if string(r.RawHead)+string(r.RawBody) != tt.in || string(r.Decoded) != tt.decoded || !r.Complete {
				t.Errorf("raw %q + %q, decoded %q, complete %v", r.RawHead, r.RawBody, r.Decoded, r.Complete)
			}
		})
	}
}

// FuzzParse checks that the parser never panics, that the raw bytes it
// records are exactly the bytes it consumed, and that the way the input is
// split into reads does not matter.
func FuzzParse(f *testing.F) {
	f.Add("GET / HTTP/1.1\r\nHost: x\r\n\r\nPOST /p HTTP/1.1\r\nContent-Length: 2\r\n\r\nab")
	f.Add("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nT: v\r\n\r\n")
	f.Add("\nGET / HTTP/1.0\nX:y\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		reqs, err := readAll(strings.NewReader(in))
		var raw strings.Builder
		for _, r := range reqs {
			raw.Write(r.RawHead)
			raw.Write(r.RawBody)
			if len(r.Decoded) > len(r.RawBody) {
				t.Errorf("decoded %q longer than raw %q", r.Decoded, r.RawBody)
			}
		}
		if !strings.HasPrefix(in, raw.String()) {
			t.Errorf("recorded %q, not a prefix of the input", raw.String())
		}
		if err == nil && raw.String() != in {
			t.Errorf("recorded %q of %q without error", raw.String(), in)
		}
		reqs2, err2 := readAll(iotest.OneByteReader(strings.NewReader(in)))
		if !reflect.DeepEqual(reqs, reqs2) || (err == nil) != (err2 == nil) {
			t.Errorf("one byte at a time: %v, %v; all at once: %v, %v", reqs2, err2, reqs, err)
		}
	})
}
