package h1

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestValidateRequest(t *testing.T) {
	tests := []struct {
		name   string
		head   string // fields after the request line
		minor  string
		status int
		want   Framing
	}{
		{"no body", "Host: a\r\n", "1", 0, Framing{Kind: NoBody}},
		{"length", "Host: a\r\nContent-Length: 5\r\n", "1", 0, Framing{Length, 5}},
		{"length zero", "Host: a\r\nContent-Length: 0\r\n", "1", 0, Framing{Kind: NoBody}},
		{"same lengths", "Host: a\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n", "1", 0, Framing{Length, 5}},
		{"chunked", "Host: a\r\nTransfer-Encoding: chunked\r\n", "1", 0, Framing{Kind: Chunked}},
		{"chunked any case", "Host: a\r\nTransfer-Encoding: ChUnKeD\r\n", "1", 0, Framing{Kind: Chunked}},
		{"http/1.0 no host", "", "0", 0, Framing{Kind: NoBody}},
		{"CL and TE", "Host: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n", "1", 400, Framing{}},
		{"TE and CL", "Host: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n", "1", 400, Framing{}},
		{"TE not chunked last", "Host: a\r\nTransfer-Encoding: chunked, gzip\r\n", "1", 400, Framing{}},
		{"TE identity", "Host: a\r\nTransfer-Encoding: identity\r\n", "1", 400, Framing{}},
		{"TE chunked twice", "Host: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "1", 400, Framing{}},
		{"TE empty", "Host: a\r\nTransfer-Encoding: \r\n", "1", 400, Framing{}},
		{"TE gzip then chunked", "Host: a\r\nTransfer-Encoding: gzip, chunked\r\n", "1", 501, Framing{}},
		{"TE with param", "Host: a\r\nTransfer-Encoding: chunked;x=1\r\n", "1", 400, Framing{}},
		{"TE on http/1.0", "Transfer-Encoding: chunked\r\n", "0", 400, Framing{}},
		{"CL differs", "Host: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n", "1", 400, Framing{}},
		{"CL list differs", "Host: a\r\nContent-Length: 5, 6\r\n", "1", 400, Framing{}},
		{"CL sign", "Host: a\r\nContent-Length: +5\r\n", "1", 400, Framing{}},
		{"CL negative", "Host: a\r\nContent-Length: -1\r\n", "1", 400, Framing{}},
		{"CL hex", "Host: a\r\nContent-Length: 0x10\r\n", "1", 400, Framing{}},
		{"CL empty", "Host: a\r\nContent-Length: \r\n", "1", 400, Framing{}},
		{"CL overflow", "Host: a\r\nContent-Length: 99999999999999999999\r\n", "1", 400, Framing{}},
		{"CL inner space", "Host: a\r\nContent-Length: 1 2\r\n", "1", 400, Framing{}},
		{"no host", "X: 1\r\n", "1", 400, Framing{}},
		{"two hosts", "Host: a\r\nHost: b\r\n", "1", 400, Framing{}},
		{"host with userinfo", "Host: u@a\r\n", "1", 400, Framing{}},
		{"host with slash", "Host: a/b\r\n", "1", 400, Framing{}},
		{"host with comma", "Host: a,b\r\n", "1", 400, Framing{}},
		{"host bad port", "Host: a:8x\r\n", "1", 400, Framing{}},
		{"host ipv6", "Host: [::1]:8080\r\n", "1", 0, Framing{Kind: NoBody}},
		{"host empty", "Host: \r\n", "1", 0, Framing{Kind: NoBody}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := "POST / HTTP/1." + tt.minor + "\r\n" + tt.head + "\r\n"
			var r Request
			if err := ParseRequest(&r, readHead(t, in), 100); err != nil {
				t.Fatal(err)
			}
			f, err := ValidateRequest(&r)
			if tt.status != 0 {
				if StatusOf(err) != tt.status {
					t.Fatalf("got %v (err %v), want status %d", f, err, tt.status)
				}
				return
			}
			if err != nil || f != tt.want {
				t.Fatalf("got %v, %v; want %v", f, err, tt.want)
			}
		})
	}
}

func TestResponseFraming(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		in       string
		want     Framing
		reusable bool
		bad      bool
	}{
		{"length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Framing{Length, 5}, true, false},
		{"head ignores length", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Framing{Kind: NoBody}, true, false},
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", Framing{Kind: NoBody}, true, false},
		{"304 with length", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", Framing{Kind: NoBody}, true, false},
		{"100", "GET", "HTTP/1.1 100 Continue\r\n\r\n", Framing{Kind: NoBody}, true, false},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", Framing{Kind: Chunked}, true, false},
		{"chunked and length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", Framing{Kind: Chunked}, false, false},
		{"TE not chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", Framing{Kind: UntilClose}, false, false},
		{"until close", "GET", "HTTP/1.1 200 OK\r\n\r\n", Framing{Kind: UntilClose}, false, false},
		{"bad length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", Framing{}, false, true},
		{"TE on 1.0", "GET", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", Framing{}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Response
			if err := ParseResponse(&r, readHead(t, tt.in), 100); err != nil {
				t.Fatal(err)
			}
			f, reusable, err := ResponseFraming(tt.method, &r)
			if tt.bad {
				if StatusOf(err) != 502 {
					t.Fatalf("err %v, want 502", err)
				}
				return
			}
			if err != nil || f != tt.want || reusable != tt.reusable {
				t.Fatalf("got %v reusable=%v err=%v", f, reusable, err)
			}
		})
	}
}

// readBody reads a whole body in segments and returns their concatenation
// and what follows it.
func readBody(t *testing.T, in string, f Framing, decode bool, oneByte bool) (string, string, error) {
	t.Helper()
	var src io.Reader = strings.NewReader(in)
	if oneByte {
		src = iotest.OneByteReader(src)
	}
	r := NewReader(src)
	var b Body
	b.Init(r, f, decode, 1024)
	var out bytes.Buffer
	for {
		seg, err := b.Next()
		out.Write(seg)
		if err == io.EOF {
			break
		}
		if err != nil {
			return out.String(), "", err
		}
	}
	rest := string(r.buf[r.r:r.w])
	more, _ := io.ReadAll(r.src)
	return out.String(), rest + string(more), nil
}

func TestChunkedPassThroughIsByteExact(t *testing.T) {
	body := "5;foo=bar\r\nhello\r\n" +
		"6 ; quoted=\"a b\"\r\n world\r\n" +
		"00000\r\n" +
		"X-Trailer: 1\r\nX-Other: two words\r\n\r\n"
	for _, oneByte := range []bool{false, true} {
		got, rest, err := readBody(t, body+"NEXT", Framing{Kind: Chunked}, false, oneByte)
		if err != nil || got != body || rest != "NEXT" {
			t.Fatalf("oneByte=%v: got %q rest %q err %v", oneByte, got, rest, err)
		}
		got, rest, err = readBody(t, body+"NEXT", Framing{Kind: Chunked}, true, oneByte)
		if err != nil || got != "hello world" || rest != "NEXT" {
			t.Fatalf("decode oneByte=%v: got %q rest %q err %v", oneByte, got, rest, err)
		}
	}
}

// In decode mode the trailer section's field lines are kept apart, as
// they came.
func TestChunkedDecodeKeepsTrailers(t *testing.T) {
	tests := []struct{ in, want string }{
		{"5\r\nhello\r\n0\r\nX-Trailer: 1\r\nX-Other: two words\r\n\r\n", "X-Trailer: 1\r\nX-Other: two words\r\n"},
		{"5\r\nhello\r\n0\r\n\r\n", ""},
	}
	for _, tt := range tests {
		for _, oneByte := range []bool{false, true} {
			var src io.Reader = strings.NewReader(tt.in)
			if oneByte {
				src = iotest.OneByteReader(src)
			}
			var b Body
			b.Init(NewReader(src), Framing{Kind: Chunked}, true, 1024)
			var data []byte
			for {
				seg, err := b.Next()
				data = append(data, seg...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("%q: %v", tt.in, err)
				}
			}
			if string(data) != "hello" || string(b.Trailers()) != tt.want {
				t.Errorf("%q (one byte at a time: %v): data %q, trailers %q; want %q", tt.in, oneByte, data, b.Trailers(), tt.want)
			}
		}
	}
}

func TestChunkedRejects(t *testing.T) {
	tests := []struct{ name, in string }{
		{"no size", "\r\nabc\r\n0\r\n\r\n"},
		{"sign", "+3\r\nabc\r\n0\r\n\r\n"},
		{"negative", "-3\r\nabc\r\n0\r\n\r\n"},
		{"0x prefix", "0x3\r\nabc\r\n0\r\n\r\n"},
		{"junk after size", "3z\r\nabc\r\n0\r\n\r\n"},
		{"overflow", "fffffffffffffffff\r\nabc\r\n0\r\n\r\n"},
		{"bare LF size line", "3\nabc\r\n0\r\n\r\n"},
		{"data longer than size", "3\r\nabcd\r\n0\r\n\r\n"},
		{"missing CRLF after data", "3\r\nabc0\r\n\r\n"},
		{"control char in ext", "3;a\x01\r\nabc\r\n0\r\n\r\n"},
		{"space without ext", "3 \r\nabc\r\n0\r\n\r\n"},
		{"trailer without colon", "0\r\nbad trailer\r\n\r\n"},
		{"trailer bare LF", "0\r\nX: 1\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := readBody(t, tt.in, Framing{Kind: Chunked}, false, false)
			if !errors.Is(err, ErrBadChunk) {
				t.Fatalf("err = %v, want ErrBadChunk", err)
			}
		})
	}
}

func TestBodyTruncatedAndLength(t *testing.T) {
	got, rest, err := readBody(t, "abcdeNEXT", Framing{Length, 5}, false, true)
	if err != nil || got != "abcde" || rest != "NEXT" {
		t.Fatalf("length: %q %q %v", got, rest, err)
	}
	if _, _, err := readBody(t, "ab", Framing{Length, 100}, false, false); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short length body: %v", err)
	}
	if _, _, err := readBody(t, "3\r\nab", Framing{Kind: Chunked}, false, false); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short chunked body: %v", err)
	}
	got, _, err = readBody(t, "all of it", Framing{Kind: UntilClose}, false, false)
	if err != nil || got != "all of it" {
		t.Fatalf("until close: %q %v", got, err)
	}
	big := "0\r\n" + strings.Repeat("X: 1234567890\r\n", 100) + "\r\n"
	if _, _, err := readBody(t, big, Framing{Kind: Chunked}, false, false); !errors.Is(err, ErrTrailerLarge) {
		t.Fatalf("large trailer: %v", err)
	}
}

// KeepAliveClose applies RFC 9112 §9.3: HTTP/1.1 persists unless the
// sender says close; HTTP/1.0 only when it says keep-alive; close wins.
// KeepAlive agrees with it.
func TestKeepAliveClose(t *testing.T) {
	for _, tc := range []struct {
		minor       int
		connection  []string
		keep, close bool
	}{
		{1, nil, true, false},
		{1, []string{"close"}, false, true},
		{1, []string{"Keep-Alive, CLOSE"}, false, true},
		{1, []string{"upgrade", "close"}, false, true},
		{1, []string{"keep-alive"}, true, false},
		{0, nil, false, false},
		{0, []string{"keep-alive"}, true, false},
		{0, []string{"x, Keep-Alive"}, true, false},
		{0, []string{"keep-alive", "close"}, false, true},
		{0, []string{"closed"}, false, false},
	} {
		var h Header
		for _, v := range tc.connection {
			h.Add("Connection", v)
		}
		keep, close := KeepAliveClose(tc.minor, &h)
		if keep != tc.keep || close != tc.close || KeepAlive(tc.minor, &h) != tc.keep {
			t.Errorf("HTTP/1.%d, Connection %q: keep %v, close %v; want %v, %v", tc.minor, tc.connection, keep, close, tc.keep, tc.close)
		}
	}
}
