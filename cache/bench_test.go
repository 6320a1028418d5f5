package cache

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
)

// BenchmarkHit measures a small hit through the proxy: one keep-alive
// HTTP/1.1 connection, a stored response of 100 bytes.
func BenchmarkHit(b *testing.B) {
	benchHit(b, 100, nil)
}

// BenchmarkHit1MiB measures a 1 MiB hit from a memory store.
func BenchmarkHit1MiB(b *testing.B) {
	benchHit(b, 1<<20, nil)
}

// BenchmarkHitDisk measures a small hit from a disk store: its file opened
// and sent, its head read once.
func BenchmarkHitDisk(b *testing.B) {
	d, err := OpenDisk(DiskOptions{Path: b.TempDir(), Size: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	benchHit(b, 100, d)
}

func benchHit(b *testing.B, size int, store Store) {
	roundTrip := hitClient(b, size, store)
	roundTrip() // the miss that stores it
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		roundTrip()
	}
}

// hitClient serves a response of size bytes through a caching proxy and
// returns a round trip of a keep-alive HTTP/1.1 client that allocates
// nothing of its own. A nil store is a memory store.
func hitClient(tb testing.TB, size int, store Store) func() {
	body := bytes.Repeat([]byte("x"), size)
	o := newOrigin(tb, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	c := newTestCache(tb, Options{Store: store})
	addr := testProxy(tb, o, c)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	br := bufio.NewReaderSize(nc, 64<<10)
	req := []byte("GET /bench HTTP/1.1\r\nHost: example.com\r\n\r\n")
	buf := make([]byte, 64<<10)
	return func() {
		if _, err := nc.Write(req); err != nil {
			tb.Fatal(err)
		}
		// The head, then Content-Length bytes.
		n := -1
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				tb.Fatal(err)
			}
			if len(line) <= 2 {
				break
			}
			if bytes.HasPrefix(line, []byte("Content-Length: ")) {
				n = 0
				for _, c := range bytes.TrimSpace(line[16:]) {
					n = n*10 + int(c-'0')
				}
			}
		}
		for n > 0 {
			k, err := br.Read(buf[:min(n, len(buf))])
			if err != nil && err != io.EOF {
				tb.Fatal(err)
			}
			n -= k
		}
	}
}
