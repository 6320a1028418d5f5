package h1

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
)

// The fuzz targets check that no input makes a parser panic, and that what a
// parser accepts survives a round trip through the writer unchanged. Their
// seed corpus lives in testdata/fuzz and is replayed by every `go test`.

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /p?q=1 HTTP/1.1\r\nHost: a:80\r\nContent-Length: 5\r\n\r\n",
		"GET / HTTP/1.0\n\n",
		"PUT /x HTTP/1.1\r\nHost: [::1]\r\nTransfer-Encoding: chunked\r\nX-A:  b \r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// HasHead after one read promises that ReadHead reads no more:
		// the proxy sets no header deadline then.
		if len(in) <= minBuf {
			r := NewReader(bytes.NewReader(in))
			if r.Fill() == nil && r.HasHead(true) {
				r.src = eofReader{}
				got, err := r.ReadHead(8<<10, true)
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					t.Fatalf("HasHead said a whole head was buffered, but ReadHead wanted more: %q", in)
				}
				// The end HasHead found is the one ReadHead alone finds.
				want, werr := NewReader(bytes.NewReader(in)).ReadHead(8<<10, true)
				if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
					t.Fatalf("after HasHead, ReadHead read %q (%v); alone, %q (%v): %q", got, err, want, werr, in)
				}
			}
		}
		r := NewReader(bytes.NewReader(in))
		head, err := r.ReadHead(8<<10, true)
		if err != nil {
			return
		}
		var req Request
		if err := ParseRequest(&req, head, 100); err != nil {
			if StatusOf(err) == 0 {
				t.Fatalf("parse error without a status: %v", err)
			}
			return
		}
		_, _ = ValidateRequest(&req)
		// The fields go out as written one by one, whatever runs of them
		// AppendTo copies whole; after some are removed and one added too.
		for round := 0; round < 2; round++ {
			var want []byte
			for i := range req.Header.Len() {
				want = append(append(append(append(want, req.Header.Name(i)...), ": "...), req.Header.Value(i)...), "\r\n"...)
			}
			if got := req.Header.AppendTo(nil); !bytes.Equal(got, want) {
				t.Fatalf("AppendTo wrote %q, want %q", got, want)
			}
			if req.Header.Len() > 1 {
				req.Header.DelAt(req.Header.Len() / 2)
			}
			req.Header.Add("X-Added", "1")
		}
		if err := ParseRequest(&req, head, 100); err != nil {
			t.Fatal(err)
		}
		_, _ = ValidateRequest(&req)
		out := AppendRequest(nil, &req)
		var again Request
		if err := ParseRequest(&again, out, 100); err != nil {
			t.Fatalf("re-encoded head does not parse: %v\n%q", err, out)
		}
		if again.Method() != req.Method() || !bytes.Equal(again.Target(), req.Target()) ||
			again.Header.String() != req.Header.String() {
			t.Fatalf("round trip changed the head:\n%q\n%q", AppendRequest(nil, &req), AppendRequest(nil, &again))
		}
	})
}

func FuzzParseResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 204\r\n\r\n",
		"HTTP/1.0 200 Fine\nServer: x\n\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
		"garbage\r\n\r\n",
		"HTTP/1.1 200 OK\r\nBadHeaderWithoutColon\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		head, err := r.ReadHead(8<<10, false)
		if err != nil {
			return
		}
		var resp Response
		if err := ParseResponse(&resp, head, 100); err != nil {
			if StatusOf(err) != 502 {
				t.Fatalf("response parse error is not a 502: %v", err)
			}
			return
		}
		for _, m := range []string{"GET", "HEAD"} {
			_, _, _ = ResponseFraming(m, &resp)
		}
		out := AppendResponse(nil, &resp)
		var again Response
		if err := ParseResponse(&again, out, 100); err != nil {
			t.Fatalf("re-encoded head does not parse: %v\n%q", err, out)
		}
		if again.Status != resp.Status || again.Header.String() != resp.Header.String() {
			t.Fatalf("round trip changed the head")
		}
	})
}

func FuzzChunked(f *testing.F) {
	for _, s := range []string{
		"5;foo=bar\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		"0\r\n\r\n",
		"a\r\n0123456789\r\n0;x\r\n\r\n",
		"3\r\nabc0\r\n\r\n",
		"fffffffffffffffff\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// Pass-through must reproduce exactly the bytes it consumed.
		r := NewReader(bytes.NewReader(in))
		var b Body
		b.Init(r, Framing{Kind: Chunked}, false, 1024)
		var raw, marked bytes.Buffer // marked: the segments Data calls data
		var err error
		for {
			var seg []byte
			seg, err = b.Next()
			raw.Write(seg)
			if b.Data() {
				marked.Write(seg)
			}
			if err != nil {
				break
			}
		}
		passTrailers := string(b.Trailers())
		if err != io.EOF {
			return
		}
		consumed := len(in) - r.Buffered() - int(int64(len(in))-r.N)
		if !bytes.Equal(raw.Bytes(), in[:consumed]) {
			t.Fatalf("pass-through changed the bytes:\n%q\n%q", raw.Bytes(), in[:consumed])
		}
		// Decoding the same input must succeed too, and the data must be the
		// chunk payloads only.
		r = NewReader(bytes.NewReader(in))
		b.Init(r, Framing{Kind: Chunked}, true, 1024)
		var data bytes.Buffer
		for {
			seg, err := b.Next()
			data.Write(seg)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("decode failed where pass-through succeeded: %v", err)
			}
		}
		if data.Len() > raw.Len() {
			t.Fatalf("decoded more than the raw body")
		}
		// Pass-through tells data from framing as decoding does.
		if !bytes.Equal(marked.Bytes(), data.Bytes()) {
			t.Fatalf("pass-through's data segments %q, decoded %q", marked.Bytes(), data.Bytes())
		}
		if passTrailers != string(b.Trailers()) {
			t.Fatalf("pass-through kept trailers %q, decoding %q", passTrailers, b.Trailers())
		}
		// AddTrailers gives each trailer line as a field, spelled as it came.
		var th Header
		b.AddTrailers(&th)
		if got := th.String(); strings.Count(got, "\r\n") != strings.Count(passTrailers, "\r\n") {
			t.Fatalf("AddTrailers made %q of %q", got, passTrailers)
		}
		// The trailers kept apart are the raw body's trailer section.
		if tr := b.Trailers(); !bytes.HasSuffix(raw.Bytes(), append(append([]byte("\r\n"), tr...), "\r\n"...)) {
			t.Fatalf("trailers %q are not the end of the raw body %q", tr, raw.Bytes())
		}
		// Ready never claims a segment Next would have to read for: fed
		// a few bytes per read, both modes read only where Ready said no.
		// (Reads of 64 bytes let decode mode's Ready look past a chunk's
		// framing to its data.)
		for _, step := range []int{3, 64} {
			for _, decode := range []bool{false, true} {
				src := &trickle{in: in, step: step}
				r = NewReader(src)
				b.Init(r, Framing{Kind: Chunked}, decode, 1024)
				for i := 0; i < len(in)+8; i++ {
					ready, reads := b.Ready(), src.reads
					_, err := b.Next()
					if ready && src.reads != reads {
						t.Fatalf("Ready was true but Next read (decode %v, step %d, at %d of %q)", decode, step, len(in)-len(src.in), in)
					}
					if err != nil {
						break
					}
				}
			}
		}
		// Limit: at the body's data size it changes nothing; one byte
		// under it, the body fails with ErrBodyTooLarge, having passed on
		// a prefix of the wire bytes that holds at most the limit's data.
		size := int64(data.Len())
		for _, limit := range []int64{size, size - 1} {
			if limit < 0 {
				continue
			}
			r = NewReader(bytes.NewReader(in))
			b.Init(r, Framing{Kind: Chunked}, false, 1024)
			b.Limit(limit)
			var out bytes.Buffer
			var err error
			for {
				var seg []byte
				seg, err = b.Next()
				out.Write(seg)
				if err != nil {
					break
				}
			}
			switch {
			case limit == size && (err != io.EOF || !bytes.Equal(out.Bytes(), raw.Bytes())):
				t.Fatalf("limit %d at the data size: %v, %q", limit, err, out.Bytes())
			case limit < size && err != ErrBodyTooLarge:
				t.Fatalf("limit %d under the data size %d: %v", limit, size, err)
			case !bytes.HasPrefix(in, out.Bytes()):
				t.Fatalf("limited pass-through is not a prefix of the input: %q", out.Bytes())
			}
			var dec Body
			dec.Init(NewReader(bytes.NewReader(out.Bytes())), Framing{Kind: Chunked}, true, 1024)
			var got int64
			for {
				seg, err := dec.Next()
				got += int64(len(seg))
				if err != nil {
					break
				}
			}
			if got > limit {
				t.Fatalf("limit %d, yet %d data bytes were passed on", limit, got)
			}
		}
	})
}

// trickle hands out its input step bytes per Read, counting the reads.
type trickle struct {
	in    []byte
	step  int
	reads int
}

func (t *trickle) Read(p []byte) (int, error) {
	t.reads++
	if len(t.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), t.step)], t.in)
	t.in = t.in[n:]
	return n, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// FuzzParseFields checks parseFields, which reads each line once, against
// the parser it replaced (parseFieldsBefore, which found each line's end
// first): the same fields, the same error.
func FuzzParseFields(f *testing.F) {
	for _, s := range []string{
		"Host: a\r\n\r\n",
		"A: 1\nB:2\n\n",
		"X-A:  b \t\r\nY:\r\n\r\n",
		"Long: 0123456789abcdefghij\tklmnopqrstuvwxyz\r\n\r\n",
		"A: b\rc\r\n\r\n",
		"A: b\x7f\r\n\r\n",
		"A: b\r\r\n\r\n",
		"\r\r\n",
		": v\r\n\r\n",
		"Na me: v\r\n\r\n",
		"Host\r\n\r\n",
		" folded\r\n\r\n",
		"A: unterminated",
		"A: b\r",
	} {
		f.Add([]byte(s), uint8(100))
	}
	f.Fuzz(func(t *testing.T, in []byte, max uint8) {
		var got, want Header
		got.arena, want.arena = in, in
		gerr := parseFields(&got, in, 0, int(max), 400)
		werr := parseFieldsBefore(&want, in, 0, int(max), 400)
		if !errorsAlike(gerr, werr) {
			t.Fatalf("%q: error %v, before %v", in, gerr, werr)
		}
		if gerr == nil && (!slices.Equal(got.fields, want.fields) || got.names != want.names) {
			t.Fatalf("%q: fields %v, before %v", in, got.fields, want.fields)
		}
	})
}

func errorsAlike(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

// parseFieldsBefore is parseFields as it was before it read each line once:
// the reference FuzzParseFields holds it to.
func parseFieldsBefore(h *Header, b []byte, i, maxHeaders, status int) error {
	for i < len(b) {
		end, next := lineAt(b, i)
		if end == i {
			return nil // the empty line that ends the head
		}
		line := b[i:end]
		if line[0] == ' ' || line[0] == '\t' {
			// RFC 9112 §5.2: obs-fold is rejected (a proxy must not pass it on).
			return errorf(status, "obsolete line folding in header")
		}
		// RFC 9112 §5.1: no whitespace between field name and colon; the
		// name must be a token, which also excludes any other whitespace.
		// The name is scanned up to the first byte that is not a token's,
		// which must be the colon.
		colon := 0
		for colon < len(line) && tchar[line[colon]] {
			colon++
		}
		if colon == len(line) || line[colon] != ':' && bytes.IndexByte(line[colon:], ':') < 0 {
			return errorf(status, "header field without a colon")
		}
		if colon == 0 || line[colon] != ':' {
			return errorf(status, "malformed header field name")
		}
		v0, v1 := colon+1, len(line)
		for v0 < v1 && (line[v0] == ' ' || line[v0] == '\t') {
			v0++
		}
		for v1 > v0 && (line[v1-1] == ' ' || line[v1-1] == '\t') {
			v1--
		}
		// RFC 9110 §5.5: no CR, LF, NUL or other controls in values.
		for _, c := range line[v0:v1] {
			if !isValueByte(c) {
				return errorf(status, "control character in header field value")
			}
		}
		if len(h.fields) >= maxHeaders {
			return ErrTooManyHeaders
		}
		h.fields = append(h.fields, field{
			n0: int32(i), n1: int32(i + colon),
			v0: int32(i + v0), v1: int32(i + v1),
		})
		h.names |= nameBit(line[:colon])
		i = next
	}
	return errorf(status, "header section not terminated")
}
