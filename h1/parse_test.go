package h1

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func readHead(t *testing.T, s string) []byte {
	t.Helper()
	r := NewReader(strings.NewReader(s))
	head, err := r.ReadHead(64<<10, true)
	if err != nil {
		t.Fatalf("ReadHead(%q): %v", s, err)
	}
	return head
}

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		status int    // 0 = valid
		method string // for valid cases
		target string
		minor  int
	}{
		{"simple", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0, "GET", "/", 1},
		{"bare LF lines", "GET /x HTTP/1.1\nHost: a\n\n", 0, "GET", "/x", 1},
		{"http/1.0", "GET / HTTP/1.0\r\n\r\n", 0, "GET", "/", 0},
		{"higher minor is 1.1", "GET / HTTP/1.7\r\nHost: a\r\n\r\n", 0, "GET", "/", 1},
		{"extension method", "PURGE /a HTTP/1.1\r\nHost: a\r\n\r\n", 0, "PURGE", "/a", 1},
		{"absolute form", "GET http://h/p?q HTTP/1.1\r\nHost: a\r\n\r\n", 0, "GET", "http://h/p?q", 1},
		{"double space", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "", "", 0},
		{"tab separator", "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, "", "", 0},
		{"missing version", "GET /\r\nHost: a\r\n\r\n", 400, "", "", 0},
		{"lowercase version", "GET / http/1.1\r\nHost: a\r\n\r\n", 400, "", "", 0},
		{"http/2 in h1", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, "", "", 0},
		{"method with slash", "GE/T / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "", "", 0},
		{"control char in target", "GET /a\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400, "", "", 0},
		{"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400, "", "", 0},
		{"no colon", "GET / HTTP/1.1\r\nHost a\r\n\r\n", 400, "", "", 0},
		{"empty name", "GET / HTTP/1.1\r\n: a\r\nHost: a\r\n\r\n", 400, "", "", 0},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", 400, "", "", 0},
		{"bare CR in value", "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r2\r\n\r\n", 400, "", "", 0},
		{"NUL in value", "GET / HTTP/1.1\r\nHost: a\r\nX: 1\x002\r\n\r\n", 400, "", "", 0},
		{"DEL in value", "GET / HTTP/1.1\r\nHost: a\r\nX: \x7f\r\n\r\n", 400, "", "", 0},
		{"bare CR line end", "GET / HTTP/1.1\r\nHost: a\rX: 1\r\n\r\n", 400, "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Request
			err := ParseRequest(&r, readHead(t, tt.in), 100)
			if tt.status != 0 {
				if got := StatusOf(err); got != tt.status {
					t.Fatalf("status %d (err %v), want %d", got, err, tt.status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Method() != tt.method || string(r.Target()) != tt.target || r.Minor != tt.minor {
				t.Fatalf("got %q %q 1.%d", r.Method(), r.Target(), r.Minor)
			}
		})
	}
}

func TestHeaderKeepsOrderAndCase(t *testing.T) {
	in := "GET / HTTP/1.1\r\nhost: Example.COM\r\nX-MiXeD-Case:  v1 \r\nx-mixed-case: v2\r\nEmpty:\r\n\r\n"
	var r Request
	if err := ParseRequest(&r, readHead(t, in), 100); err != nil {
		t.Fatal(err)
	}
	want := "host: Example.COM\r\nX-MiXeD-Case: v1\r\nx-mixed-case: v2\r\nEmpty: \r\n"
	if got := r.Header.String(); got != want {
		t.Fatalf("got %q want %q", got, want)
	}
	if got := string(r.Header.Get("X-MIXED-CASE")); got != "v1" {
		t.Fatalf("Get = %q", got)
	}
	r.Header.Set("x-mixed-CASE", "v3")
	r.Header.Add("Via", "1.1 sluice")
	r.Header.Del("empty")
	want = "host: Example.COM\r\nX-MiXeD-Case: v3\r\nVia: 1.1 sluice\r\n"
	if got := r.Header.String(); got != want {
		t.Fatalf("after edits got %q want %q", got, want)
	}
	out := string(AppendRequest(nil, &r))
	if out != "GET / HTTP/1.1\r\n"+want+"\r\n" {
		t.Fatalf("AppendRequest = %q", out)
	}
}

func TestTooManyHeaders(t *testing.T) {
	in := "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: 1\r\n", 100) + "\r\n"
	var r Request
	if err := ParseRequest(&r, readHead(t, in), 100); !errors.Is(err, ErrTooManyHeaders) {
		t.Fatalf("err = %v, want ErrTooManyHeaders", err)
	}
	in = "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: 1\r\n", 99) + "\r\n"
	if err := ParseRequest(&r, readHead(t, in), 100); err != nil {
		t.Fatalf("100 fields: %v", err)
	}
}

func TestReadHeadLimits(t *testing.T) {
	long := "GET /" + strings.Repeat("a", 300) + " HTTP/1.1\r\nHost: a\r\n\r\n"
	r := NewReader(strings.NewReader(long))
	if _, err := r.ReadHead(256, true); !errors.Is(err, ErrURITooLong) {
		t.Fatalf("long request line: %v", err)
	}
	big := "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("b", 300) + "\r\n\r\n"
	r = NewReader(strings.NewReader(big))
	if _, err := r.ReadHead(256, true); !errors.Is(err, ErrHeadTooLarge) {
		t.Fatalf("large head: %v", err)
	}
	// A head larger than the first buffer but within the limit is read whole,
	// one byte at a time.
	huge := "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("c", 20000) + "\r\n\r\nNEXT"
	r = NewReader(iotest.OneByteReader(strings.NewReader(huge)))
	head, err := r.ReadHead(64<<10, true)
	if err != nil || len(head) != len(huge)-4 {
		t.Fatalf("huge head: len %d err %v", len(head), err)
	}
	rest, _ := io.ReadAll(io.MultiReader(bytes.NewReader(r.buf[r.r:r.w]), r.src))
	if string(rest) != "NEXT" {
		t.Fatalf("left over %q", rest)
	}
	// Clean EOF before a head, and EOF in the middle of one.
	r = NewReader(strings.NewReader(""))
	if _, err := r.ReadHead(1024, true); err != io.EOF {
		t.Fatalf("empty input: %v", err)
	}
	r = NewReader(strings.NewReader("GET / HT"))
	if _, err := r.ReadHead(1024, true); err != io.ErrUnexpectedEOF {
		t.Fatalf("partial head: %v", err)
	}
}

func TestPipelinedHeads(t *testing.T) {
	in := "\r\nGET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n"
	r := NewReader(iotest.HalfReader(strings.NewReader(in)))
	for _, want := range []string{"/1", "/2"} {
		head, err := r.ReadHead(1024, true)
		if err != nil {
			t.Fatal(err)
		}
		var req Request
		if err := ParseRequest(&req, head, 100); err != nil {
			t.Fatal(err)
		}
		if string(req.Target()) != want {
			t.Fatalf("target %q want %q", req.Target(), want)
		}
	}
}

func TestParseResponse(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		ok     bool
		status int
		reason string
	}{
		{"ok", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true, 200, "OK"},
		{"no reason", "HTTP/1.1 204\r\n\r\n", true, 204, ""},
		{"empty reason", "HTTP/1.1 204 \r\n\r\n", true, 204, ""},
		{"http/1.0", "HTTP/1.0 200 Fine Thanks\r\n\r\n", true, 200, "Fine Thanks"},
		{"garbage", "garbage\r\n\r\n", false, 0, ""},
		{"http/0.9 style", "hello world this is a body\r\n\r\n", false, 0, ""},
		{"no colon", "HTTP/1.1 200 OK\r\nBadHeaderWithoutColon\r\n\r\n", false, 0, ""},
		{"space before colon", "HTTP/1.1 200 OK\r\nServer : x\r\n\r\n", false, 0, ""},
		{"status 99", "HTTP/1.1 099 X\r\n\r\n", false, 0, ""},
		{"status letters", "HTTP/1.1 2OO OK\r\n\r\n", false, 0, ""},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX: a\r\n\tb\r\n\r\n", false, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Response
			err := ParseResponse(&r, readHead(t, tt.in), 100)
			if !tt.ok {
				if StatusOf(err) != 502 {
					t.Fatalf("err %v, want a 502 *Error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tt.status || string(r.Reason()) != tt.reason {
				t.Fatalf("got %d %q", r.Status, r.Reason())
			}
		})
	}
}

func TestHasHead(t *testing.T) {
	for _, tc := range []struct {
		in        string
		skipEmpty bool
		want      bool
	}{
		{"", true, false},
		{"GET / HTTP/1.1\r\nHost: a\r\n", true, false},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", true, true},
		{"GET / HTTP/1.1\nHost: a\n\n", true, true},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /next", true, true},
		// Empty lines before a request are skipped, not taken for its end.
		{"\r\n\r\n", true, false},
		{"\r\n\r\nGET / HTTP/1.1\r\n", true, false},
		{"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", true, true},
		{"\r\n\r\n", false, true},
	} {
		r := NewReader(strings.NewReader(tc.in))
		if tc.in != "" {
			if err := r.Fill(); err != nil {
				t.Fatal(err)
			}
		}
		if got := r.HasHead(tc.skipEmpty); got != tc.want {
			t.Errorf("HasHead(%q, skipEmpty %v) = %v, want %v", tc.in, tc.skipEmpty, got, tc.want)
		}
		if tc.want {
			// ReadHead then finds it without reading: the source is spent.
			if _, err := r.ReadHead(1<<10, tc.skipEmpty); err != nil {
				t.Errorf("ReadHead after HasHead(%q): %v", tc.in, err)
			}
		}
	}
}

// TestHasHeadPipelined checks that the end of a head HasHead found is
// forgotten as the head is consumed: each of pipelined heads is found and
// read whole, and a head cut short behind them is not taken for whole.
func TestHasHeadPipelined(t *testing.T) {
	heads := []string{"GET /a HTTP/1.1\r\nHost: a\r\n\r\n", "GET /bb HTTP/1.1\r\nHost: a\r\nX: 1\r\n\r\n", "GET /c HTTP/1.1\n\n"}
	r := NewReader(strings.NewReader(strings.Join(heads, "") + "GET /d HTTP/1.1\r\n"))
	if err := r.Fill(); err != nil {
		t.Fatal(err)
	}
	for _, want := range heads {
		if !r.HasHead(true) || !r.HasHead(true) {
			t.Fatalf("HasHead false before %q", want)
		}
		got, err := r.ReadHead(1<<10, true)
		if err != nil || string(got) != want {
			t.Fatalf("ReadHead: %q, %v; want %q", got, err, want)
		}
	}
	if r.HasHead(true) {
		t.Error("HasHead true for a head cut short")
	}
	r = NewReader(strings.NewReader(heads[0] + heads[1]))
	if err := r.Fill(); err != nil || !r.HasHead(true) {
		t.Fatal("no head")
	}
	r.Discard(len(heads[0]))
	if got, err := r.ReadHead(1<<10, true); err != nil || string(got) != heads[1] {
		t.Errorf("ReadHead after Discard: %q, %v; want %q", got, err, heads[1])
	}
}

// TestValueEnd checks valueEnd, which looks at eight bytes at a time,
// against isValueByte byte by byte: every byte value, at every position of
// values long enough for two words and a tail, among bytes of both sides of
// the bounds it tests.
func TestValueEnd(t *testing.T) {
	for _, fill := range []byte{'a', ' ', '\t', 0x80, 0xff, 0x7e, 0x21, '\r'} {
		for pos := 0; pos < 19; pos++ {
			for c := 0; c < 256; c++ {
				v := bytes.Repeat([]byte{fill}, 19)
				v[pos] = byte(c)
				want := slices.IndexFunc(v, func(c byte) bool { return !isValueByte(c) })
				if want < 0 {
					want = len(v)
				}
				if got := valueEnd(v, 0); got != want {
					t.Fatalf("valueEnd(%q) = %d, want %d", v, got, want)
				}
			}
		}
	}
}
