package h2

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// idleConnBytes opens n client connections to a server that either serves
// each with a Conn (serve) or only holds the accepted socket, waits until
// each has finished its SETTINGS exchange (and, with request, one request),
// and returns heap plus stack bytes in use per connection. The difference
// between the two is what a Conn costs an idle connection.
func idleConnBytes(tb testing.TB, n int, serve, request bool) float64 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, n)
	conns := make(chan *Conn, n)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- nc
			if serve {
				c := NewConn(nc, nil, nil, ok)
				conns <- c
				go c.Serve()
			}
		}
	}()
	var clients []net.Conn
	var servers []net.Conn
	defer func() {
		for _, nc := range clients {
			nc.Close()
		}
		for _, nc := range servers {
			nc.Close()
		}
	}()
	before := memInUse()
	for i := 0; i < n; i++ {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			tb.Fatal(err)
		}
		clients = append(clients, nc)
		servers = append(servers, <-accepted)
		if !serve {
			continue
		}
		rc := &rawClient{t: nil, nc: nc, fr: http2.NewFramer(nc, nc)}
		rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		io.WriteString(nc, http2.ClientPreface)
		rc.fr.WriteSettings()
		rc.fr.WriteSettingsAck()
		if request {
			var b []byte
			w := hpack.NewEncoder(appendWriter{&b})
			for j := 0; j < len(getReq); j += 2 {
				w.WriteField(hpack.HeaderField{Name: getReq[j], Value: getReq[j+1]})
			}
			rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b, EndStream: true, EndHeaders: true})
		}
		// Read until our SETTINGS is acknowledged (and the response ended).
		acked, ended := false, !request
		for !acked || !ended {
			nc.SetReadDeadline(time.Now().Add(failsafe))
			f, err := rc.fr.ReadFrame()
			if err != nil {
				tb.Fatal(err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				acked = acked || f.IsAck()
			case *http2.DataFrame:
				ended = ended || f.StreamEnded()
			}
		}
	}
	// Let handlers and flushers finish before measuring.
	if serve {
		for i := 0; i < n; i++ {
			c := <-conns
			for {
				c.mu.Lock()
				idle := c.handlers == 0 && !c.flushing && len(c.streams) == 0
				c.mu.Unlock()
				if idle {
					break
				}
				runtime.Gosched()
			}
		}
	}
	after := memInUse()
	return float64(after-before) / float64(n)
}

type appendWriter struct{ b *[]byte }

func (w appendWriter) Write(p []byte) (int, error) { *w.b = append(*w.b, p...); return len(p), nil }

func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// BenchmarkIdleConnMemory reports what an idle connection costs: heap and
// stack bytes per connection, with the sockets alone subtracted. Run it
// without -race, which inflates both.
//
//	go test -run '^$' -bench IdleConnMemory -benchtime 1x ./h2/
func BenchmarkIdleConnMemory(b *testing.B) {
	const n = 2000
	for i := 0; i < b.N; i++ {
		base := idleConnBytes(b, n, false, false)
		fresh := idleConnBytes(b, n, true, false)
		used := idleConnBytes(b, n, true, true)
		b.ReportMetric(fresh-base, "B/idle-conn")
		b.ReportMetric(used-base, "B/idle-conn-after-request")
		b.ReportMetric(base, "B/socket-pair")
	}
}

// TestStructSizes guards the size of what the engine allocates per
// request and per connection against the allocator's size classes: with
// its 8-byte header for objects over 512 bytes, a Stream of 888 bytes
// fills the 896-byte class and so does a Conn (1016 bytes before the field
// checks of a header block being read moved to a pool); a byte more costs
// 128 (a Conn is most of what an idle connection costs beside TLS).
func TestStructSizes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		size, max uintptr
	}{
		{"Stream", unsafe.Sizeof(Stream{}), 888},
		{"Conn", unsafe.Sizeof(Conn{}), 888},
		{"ClientStream", unsafe.Sizeof(ClientStream{}), 768},
	} {
		if tc.size > tc.max {
			t.Errorf("a %s is %d bytes, want at most %d", tc.name, tc.size, tc.max)
		}
	}
}
