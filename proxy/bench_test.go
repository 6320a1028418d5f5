package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/pool"
)

// roundTripper sends one fixed request per call on a kept-alive
// connection and reads a response of known length.
type roundTripper struct {
	nc   net.Conn
	req  []byte
	buf  []byte
	want int
}

func (r *roundTripper) do() error {
	if _, err := r.nc.Write(r.req); err != nil {
		return err
	}
	_, err := io.ReadFull(r.nc, r.buf[:r.want])
	return err
}

func benchProxy(tb testing.TB, body int) (*roundTripper, func()) {
	return benchProxyWith(tb, body, nil)
}

// benchProxyWith is benchProxy with the Server changed by set before it
// serves.
func benchProxyWith(tb testing.TB, body int, set func(*Server)) (*roundTripper, func()) {
	return benchProxyOver(tb, body, set, false)
}

// benchProxyOver is benchProxyWith, over TLS to the upstream when overTLS
// is set.
func benchProxyOver(tb testing.TB, body int, set func(*Server), overTLS bool) (*roundTripper, func()) {
	payload := bytes.Repeat([]byte("x"), body)
	resp := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+itoa(body)+"\r\n\r\n"), payload...)
	opts := &PeerOptions{Pool: &pool.Limits{MaxIdle: 16, IdleTimeout: time.Minute}}
	var srvTLS *tls.Config
	if overTLS {
		ca := tlstest.NewCA(tb, "bench CA")
		srvTLS = &tls.Config{Certificates: []tls.Certificate{*ca.Server(tb, "127.0.0.1").TLS}}
		opts.TLS = &TLS{Config: &tls.Config{RootCAs: ca.Pool()}}
	}
	up := upstreamtest.Canned(tb, resp, 0, srvTLS)
	srv := &Server{Handler: &ordered{peers: []*Peer{{Addr: up, Options: opts}}}, Forwarding: Forwarding{}}
	if set != nil {
		set(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(ln)
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	rt := &roundTripper{nc: nc, req: []byte("GET /bench HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"), buf: make([]byte, len(resp)+512)}
	// The proxy's response differs from the upstream's only in what it
	// adds; learn its length from the first response.
	nc.Write(rt.req)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n := 0
	for !bytes.Contains(rt.buf[:n], []byte("\r\n\r\n")) || n-bytes.Index(rt.buf[:n], []byte("\r\n\r\n"))-4 < body {
		m, err := nc.Read(rt.buf[n:])
		if err != nil {
			tb.Fatal(err)
		}
		n += m
	}
	nc.SetReadDeadline(time.Time{})
	rt.want = n
	return rt, func() {
		nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// BenchmarkProxyRoundTrip measures one small GET through the proxy on a
// kept-alive client connection and a pooled upstream connection.
func BenchmarkProxyRoundTrip(b *testing.B) { benchRoundTrip(b, false) }

// BenchmarkProxyRoundTripTLS is BenchmarkProxyRoundTrip with TLS to the
// upstream.
func BenchmarkProxyRoundTripTLS(b *testing.B) { benchRoundTrip(b, true) }

func benchRoundTrip(b *testing.B, overTLS bool) {
	for _, size := range []int{64, 16 << 10} {
		b.Run(itoa(size)+"B", func(b *testing.B) {
			rt, stop := benchProxyOver(b, size, nil, overTLS)
			defer stop()
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := rt.do(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProxyConnPerRequest measures one small GET on a new client
// connection that the proxy closes after the response (the upstream
// connection is pooled). allocs/op counts the client's dial too.
func BenchmarkProxyConnPerRequest(b *testing.B) {
	rt, stop := benchProxy(b, 64)
	defer stop()
	addr := rt.nc.RemoteAddr().String()
	req := []byte("GET /bench HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
	buf := make([]byte, 4096)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := nc.Write(req); err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := nc.Read(buf); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
		nc.Close()
	}
}
