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
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/pool"
)

// BenchmarkProxyRoundTripH2 is BenchmarkProxyRoundTrip for an HTTP/2
// client (h2c, one stream at a time on one connection) in front of the
// same HTTP/1.1 upstream. The client is a bare framer with its header
// block encoded once, so that allocs/op are nearly all the proxy's.
func BenchmarkProxyRoundTripH2(b *testing.B) {
	for _, size := range []int{64, 16 << 10} {
		b.Run(itoa(size)+"B", func(b *testing.B) {
			c := h2ToH1(b, size)
			b.SetBytes(int64(size))
			c.run(b)
		})
	}
}

// h2ToH1 is an HTTP/2 client (h2Bench) of a proxy in front of an
// HTTP/1.1 upstream answering a GET with size bytes.
func h2ToH1(tb testing.TB, size int) *h2Bench {
	payload := bytes.Repeat([]byte("x"), size)
	resp := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+itoa(size)+"\r\n\r\n"), payload...)
	up := upstreamtest.Canned(tb, resp, 0, nil)
	opts := &PeerOptions{Pool: &pool.Limits{MaxIdle: 16, IdleTimeout: time.Minute}}
	return startH2Bench(tb, &Server{Handler: &ordered{peers: []*Peer{{Addr: up, Options: opts}}}},
		[]hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
			{Name: ":path", Value: "/bench"}, {Name: ":authority", Value: "bench"}, {Name: "user-agent", Value: "bench"}, {Name: "accept", Value: "*/*"}}, nil)
}

// BenchmarkProxyRoundTripH2ToH2 measures a gRPC-shaped unary call from an
// HTTP/2 client to an HTTP/2 upstream (h2c both ways): a POST with a small
// body, answered with a header block, a small body and trailers. The
// upstream runs in the process: allocs/op count its HTTP/2 server too.
func BenchmarkProxyRoundTripH2ToH2(b *testing.B) { h2ToH2(b).run(b) }

// h2ToH2 is an HTTP/2 client (h2Bench) making gRPC-shaped calls through a
// proxy to an HTTP/2 upstream in the process.
func h2ToH2(tb testing.TB) *h2Bench {
	head := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}
	trailers := []hpack.HeaderField{{Name: "grpc-status", Value: "0"}, {Name: "grpc-message", Value: ""}}
	msg := []byte{0, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'}
	up := startH2Upstream(tb, nil, nil, func(_ *h2.Conn, st *h2.Stream) {
		io.Copy(io.Discard, st)
		st.WriteResponse(head, msg, false)
		st.WriteTrailers(trailers)
	})
	opts := &PeerOptions{Protocol: ProtocolH2C, Pool: &pool.Limits{MaxIdle: 16, IdleTimeout: time.Minute}}
	return startH2Bench(tb, &Server{Handler: &ordered{peers: []*Peer{{Addr: up.addr(), Options: opts}}}},
		[]hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
			{Name: ":path", Value: "/pkg.Svc/Call"}, {Name: ":authority", Value: "bench"}, {Name: "content-type", Value: "application/grpc"},
			{Name: "te", Value: "trailers"}, {Name: "user-agent", Value: "grpc-go/1.0"}}, msg)
}

// h2Bench is a bare HTTP/2 client of srv (h2c) that sends one request,
// its header block encoded once, at a time.
type h2Bench struct {
	fr *http2.Framer
	// first is the request's header block as a client's first request
	// sends it, its fields added to the HPACK table; block as the
	// requests after it do, the fields indexed, as a browser's or
	// h2load's repeated requests are.
	first, block []byte
	body         []byte
	id           uint32
}

func startH2Bench(b testing.TB, srv *Server, fields []hpack.HeaderField, body []byte) *h2Bench {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.ServeWith(ln, ListenerOptions{Protocols: []string{"h2c"}})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	io.WriteString(nc, h2Preface)
	fr := http2.NewFramer(nc, bufio.NewReader(nc))
	fr.SetReuseFrames() // the client's frames are not the proxy's allocations
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	fr.WriteWindowUpdate(0, 1<<30)
	var first, block bytes.Buffer
	enc := hpack.NewEncoder(&first)
	for _, f := range fields {
		enc.WriteField(f)
	}
	enc = hpack.NewEncoder(&block)
	for _, f := range fields {
		enc.WriteField(f)
	}
	block.Reset()
	for _, f := range fields {
		enc.WriteField(f)
	}
	return &h2Bench{fr: fr, first: first.Bytes(), block: block.Bytes(), body: body, id: 1}
}

// roundTrip sends the request and reads frames until its stream ends.
func (c *h2Bench) roundTrip() error {
	fr := c.fr
	block := c.block
	if c.id == 1 {
		block = c.first
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: c.id, BlockFragment: block, EndStream: c.body == nil, EndHeaders: true}); err != nil {
		return err
	}
	if c.body != nil {
		if err := fr.WriteData(c.id, true, c.body); err != nil {
			return err
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		if f.Header().StreamID == c.id && f.Header().Flags.Has(http2.FlagDataEndStream) {
			c.id += 2
			return nil
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			return http2.StreamError{StreamID: c.id, Code: rst.ErrCode}
		}
	}
}

func (c *h2Bench) run(b *testing.B) {
	if err := c.roundTrip(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.roundTrip(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProxyRoundTripToH2 measures one small GET from an HTTP/1.1
// client on a kept-alive connection to an HTTP/2 upstream (h2c, one shared
// connection): the upstream side of a gRPC call, without gRPC. The
// upstream runs in the process: allocs/op count its HTTP/2 server too.
func BenchmarkProxyRoundTripToH2(b *testing.B) {
	rt := h1ToH2(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := rt.do(); err != nil {
			b.Fatal(err)
		}
	}
}

// h1ToH2 is an HTTP/1.1 client (roundTripper) of a proxy in front of an
// HTTP/2 upstream in the process answering a GET with 64 bytes.
func h1ToH2(tb testing.TB) *roundTripper {
	body := bytes.Repeat([]byte("x"), 64)
	fields := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "text/plain"}, {Name: "content-length", Value: "64"}}
	up := startH2Upstream(tb, nil, nil, func(_ *h2.Conn, st *h2.Stream) { st.WriteResponse(fields, body, true) })
	opts := &PeerOptions{Protocol: ProtocolH2C, Pool: &pool.Limits{MaxIdle: 16, IdleTimeout: time.Minute}}
	srv := &Server{Handler: &ordered{peers: []*Peer{{Addr: up.addr(), Options: opts}}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(ln)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	rt := &roundTripper{nc: nc, req: []byte("GET /bench HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench\r\n\r\n"), buf: make([]byte, 4096)}
	// Learn the response's length from the first.
	nc.Write(rt.req)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n := 0
	for {
		m, err := nc.Read(rt.buf[n:])
		if err != nil {
			tb.Fatal(err)
		}
		n += m
		if i := bytes.Index(rt.buf[:n], []byte("\r\n\r\n")); i >= 0 && n-i-4 >= len(body) {
			break
		}
	}
	nc.SetReadDeadline(time.Time{})
	rt.want = n
	return rt
}
