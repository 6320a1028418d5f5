package h2

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// BenchmarkExchange measures exchanges between this package's two ends, a
// ClientConn and a Conn, on one loopback TCP connection: both read loops,
// both write paths, flow control and HPACK each way. allocs/op count both
// ends.
//
//	go test -run '^$' -bench Exchange -benchmem ./h2/
func BenchmarkExchange(b *testing.B) {
	small := bytes.Repeat([]byte("x"), 64)
	head := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "text/plain"}}
	bufs := sync.Pool{New: func() any { return new([32 << 10]byte) }}
	handler := func(st *Stream) {
		if st.NoBody() {
			st.WriteResponse(head, small, true)
			return
		}
		buf := bufs.Get().(*[32 << 10]byte)
		defer bufs.Put(buf)
		n := 0
		for n < len(buf) {
			k, err := st.Read(buf[n:])
			n += k
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
		}
		st.WriteResponse(head, buf[:n], true)
	}
	get := request("GET", "/")
	post := request("POST", "/")
	big := bytes.Repeat([]byte("y"), 16<<10)
	b.Run("GET", func(b *testing.B) {
		cc := benchPair(b, handler)
		buf := make([]byte, 32<<10)
		b.ReportAllocs()
		for b.Loop() {
			if err := benchExchange(cc, get, nil, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("POST-16KiB", func(b *testing.B) {
		cc := benchPair(b, handler)
		buf := make([]byte, 32<<10)
		b.ReportAllocs()
		b.SetBytes(2 * int64(len(big)))
		for b.Loop() {
			if err := benchExchange(cc, post, big, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GET-16-streams", func(b *testing.B) {
		cc := benchPair(b, handler)
		b.ReportAllocs()
		b.SetParallelism(8) // 16 goroutines on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 32<<10)
			for pb.Next() {
				if err := benchExchange(cc, get, nil, buf); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// benchPair serves h on a Conn over loopback TCP and returns a ClientConn
// to it; both end with the benchmark.
func benchPair(b *testing.B, h Handler) *ClientConn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	conns := make(chan *Conn, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := ln.Accept()
		if err != nil {
			close(conns)
			return
		}
		c := NewConn(nc, nil, &Settings{MaxConcurrentStreams: 1000}, h)
		conns <- c
		c.Serve()
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	cc := NewClientConn(nc, nil)
	c := <-conns
	b.Cleanup(func() {
		cc.Close()
		<-cc.Done()
		if c != nil {
			c.Close()
		}
		ln.Close()
		wg.Wait()
	})
	return cc
}

// benchExchange sends one request (END_STREAM with its body), reads the
// response to its end into buf, and releases the stream, as a proxy does.
func benchExchange(cc *ClientConn, req []hpack.HeaderField, body, buf []byte) error {
	cs, sent, err := cc.OpenStreamBody(req, body, true)
	if err != nil {
		return err
	}
	defer cs.Release()
	if sent < len(body) {
		if _, err := cs.WriteLast(body[sent:]); err != nil {
			return err
		}
	}
	if _, err := cs.ReadHeader(); err != nil {
		return err
	}
	for {
		_, err := cs.Read(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
