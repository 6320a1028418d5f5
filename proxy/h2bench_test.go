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
