package h1

import (
	"bytes"
	"testing"
)

var benchHead = []byte("GET /api/v1/items?limit=20 HTTP/1.1\r\n" +
	"Host: api.example.com\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36\r\n" +
	"Accept: application/json\r\n" +
	"Accept-Encoding: gzip, deflate, br\r\n" +
	"Accept-Language: en-US,en;q=0.9\r\n" +
	"Cookie: session=abcdef0123456789; theme=dark\r\n" +
	"X-Request-Id: 7f3a2c1e-5b6d-4e8f-9a0b-1c2d3e4f5a6b\r\n" +
	"Connection: keep-alive\r\n\r\n")

// BenchmarkParseRequest measures reading and parsing a typical browser
// request head, then validating its framing.
func BenchmarkParseRequest(b *testing.B) {
	var req Request
	src := bytes.NewReader(benchHead)
	r := NewReader(src)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchHead)))
	for i := 0; i < b.N; i++ {
		src.Reset(benchHead)
		r.Reset(src)
		head, err := r.ReadHead(64<<10, true)
		if err != nil {
			b.Fatal(err)
		}
		if err := ParseRequest(&req, head, 100); err != nil {
			b.Fatal(err)
		}
		if _, err := ValidateRequest(&req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteRequest measures encoding the same head.
func BenchmarkWriteRequest(b *testing.B) {
	var req Request
	if err := ParseRequest(&req, benchHead, 100); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = AppendRequest(buf[:0], &req)
	}
}

func TestParseAllocations(t *testing.T) {
	var req Request
	src := bytes.NewReader(benchHead)
	r := NewReader(src)
	allocs := testing.AllocsPerRun(1000, func() {
		src.Reset(benchHead)
		r.Reset(src)
		head, _ := r.ReadHead(64<<10, true)
		ParseRequest(&req, head, 100)
		ValidateRequest(&req)
	})
	if allocs != 0 {
		t.Fatalf("parsing a request head allocates %.1f times", allocs)
	}
}
