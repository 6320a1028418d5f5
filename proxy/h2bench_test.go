package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h2"
	"github.com/sluice-proxy/sluice/pool"
)

// BenchmarkProxyRoundTripH2 is BenchmarkProxyRoundTrip for an HTTP/2
// client (h2c, one stream at a time on one connection) in front of the
// same HTTP/1.1 upstream. The client is a bare framer with its header
// block encoded once, so that allocs/op are nearly all the proxy's.
func BenchmarkProxyRoundTripH2(b *testing.B) {
	for _, size := range []int{64, 16 << 10} {
		b.Run(itoa(size)+"B", func(b *testing.B) {
			payload := bytes.Repeat([]byte("x"), size)
			resp := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+itoa(size)+"\r\n\r\n"), payload...)
			up := fastUpstream(b, resp, nil)
			opts := &PeerOptions{Pool: &pool.Limits{MaxIdle: 16, IdleTimeout: time.Minute}}
			srv := &Server{Handler: &ordered{peers: []*Peer{{Addr: up, Options: opts}}}}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go srv.ServeWith(ln, ListenerOptions{Protocols: []string{"h2c"}})
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(ctx)
			}()
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			io.WriteString(nc, h2Preface)
			fr := http2.NewFramer(nc, bufio.NewReader(nc))
			fr.SetReuseFrames() // the client's frames are not the proxy's allocations
			fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
			fr.WriteWindowUpdate(0, 1<<30)
			var block bytes.Buffer
			enc := hpack.NewEncoder(&block)
			for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
				{Name: ":path", Value: "/bench"}, {Name: ":authority", Value: "bench"}, {Name: "user-agent", Value: "bench"}, {Name: "accept", Value: "*/*"}} {
				enc.WriteField(f)
			}
			id := uint32(1)
			roundTrip := func() error {
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return err
					}
					if f.Header().StreamID == id && f.Header().Flags.Has(http2.FlagDataEndStream) {
						id += 2
						return nil
					}
					if rst, ok := f.(*http2.RSTStreamFrame); ok {
						return http2.StreamError{StreamID: id, Code: rst.ErrCode}
					}
				}
			}
			if err := roundTrip(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := roundTrip(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProxyRoundTripToH2 measures one small GET from an HTTP/1.1
// client on a kept-alive connection to an HTTP/2 upstream (h2c, one shared
// connection): the upstream side of a gRPC call, without gRPC. The
// upstream runs in the process: allocs/op count its HTTP/2 server too.
func BenchmarkProxyRoundTripToH2(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 64)
	fields := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "text/plain"}, {Name: "content-length", Value: "64"}}
	up := startH2Upstream(b, nil, nil, func(_ *h2.Conn, st *h2.Stream) { st.WriteResponse(fields, body, true) })
	opts := &PeerOptions{Protocol: ProtocolH2C, Pool: &pool.Limits{MaxIdle: 16, IdleTimeout: time.Minute}}
	srv := &Server{Handler: &ordered{peers: []*Peer{{Addr: up.addr(), Options: opts}}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	rt := &roundTripper{nc: nc, req: []byte("GET /bench HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench\r\n\r\n"), buf: make([]byte, 4096)}
	// Learn the response's length from the first.
	nc.Write(rt.req)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n := 0
	for {
		m, err := nc.Read(rt.buf[n:])
		if err != nil {
			b.Fatal(err)
		}
		n += m
		if i := bytes.Index(rt.buf[:n], []byte("\r\n\r\n")); i >= 0 && n-i-4 >= len(body) {
			break
		}
	}
	nc.SetReadDeadline(time.Time{})
	rt.want = n
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := rt.do(); err != nil {
			b.Fatal(err)
		}
	}
}
