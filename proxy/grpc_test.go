package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-proxy/sluice/h2"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestGRPCThroughProxy: gRPC calls from a gRPC client, over h2c to sluice
// and over h2c to a gRPC server (grpc-go's health service): a unary call,
// its error status carried in trailers, and a server-streaming call whose
// messages arrive as the server sends them.
func TestGRPCThroughProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hsrv := health.NewServer()
	hsrv.SetServingStatus("orders", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hsrv)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)

	hs, _ := startH2(t, peers(h2Options(ProtocolH2C, nil), ln.Addr().String()), h2c())
	cc, err := grpc.NewClient(hs.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "orders"})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("unary call: %v %v", resp, err)
	}
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unary call for an unknown service: %v, want NotFound from the server's trailers", err)
	}

	watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := watch.Recv()
	if err != nil || first.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first streamed message: %v %v", first, err)
	}
	hsrv.SetServingStatus("orders", healthpb.HealthCheckResponse_NOT_SERVING)
	next, err := watch.Recv()
	if err != nil || next.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("second streamed message: %v %v", next, err)
	}
}

// TestGRPCProxyErrors: an answer sluice makes itself reaches a gRPC client
// as a gRPC status (UNAVAILABLE, with the Proxy-Status text as its
// message), not as an HTTP status the client would report as a protocol
// error.
func TestGRPCProxyErrors(t *testing.T) {
	hs, _ := startH2(t, peers(h2Options(ProtocolH2C, nil), upstreamtest.Dead(t)), h2c())
	cc, err := grpc.NewClient(hs.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "sluice; error=connection_refused") {
		t.Errorf("a call to a dead server: %v, want UNAVAILABLE with the Proxy-Status text", err)
	}
}

// tooMany refuses every request itself, as a rate limit does.
type tooMany struct{}

func (tooMany) UpstreamPeer(*Session) (*Peer, error) { return nil, nil }
func (tooMany) RequestFilter(*Session) *Response {
	r := Text(429, "429 Too Many Requests (rate limited)\n")
	r.Header.Add("Retry-After", "7")
	return r
}

// TestGRPCPhaseAnswer: an answer a phase gives a gRPC call reaches the
// client as a gRPC status (429: UNAVAILABLE), with its text and its other
// fields, not as an HTTP error the client has to guess from.
func TestGRPCPhaseAnswer(t *testing.T) {
	hs, _ := startH2(t, tooMany{}, h2c())
	cc, err := grpc.NewClient(hs.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var trailer metadata.MD // a trailers-only answer's fields are its trailers
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || st.Message() != "429 Too Many Requests (rate limited)" {
		t.Errorf("a refused call: %v, want UNAVAILABLE with the answer's text", err)
	}
	if got := trailer.Get("retry-after"); len(got) != 1 || got[0] != "7" {
		t.Errorf("retry-after %v, want the answer's 7", got)
	}
}

func TestGRPCMessageEncoding(t *testing.T) {
	for in, want := range map[string]string{
		`sluice; error=connection_refused; details="1 try: -"`: `sluice; error=connection_refused; details="1 try: -"`,
		"100% \n é": "100%25 %0A %C3%A9",
	} {
		if got := grpcMessage(in); got != want {
			t.Errorf("grpcMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

// streamingService answers grpc-go's interop TestService's streaming
// calls: StreamingInputCall sums the payload sizes a client streams, and
// FullDuplexCall answers each message as it comes, with a payload of the
// size it asks for.
type streamingService struct {
	testpb.UnimplementedTestServiceServer
}

func (streamingService) StreamingInputCall(stream testpb.TestService_StreamingInputCallServer) error {
	total := 0
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		if err != nil {
			return err
		}
		total += len(m.GetPayload().GetBody())
	}
}

func (streamingService) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		size := m.GetResponseParameters()[0].GetSize()
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, size)}}); err != nil {
			return err
		}
	}
}

// TestGRPCStreamingThroughProxy: client-streaming and bidirectional calls
// through sluice, over h2c to the server and over h2 (TLS) to another,
// each a ping-pong where every answer must come back before the next
// message goes: nothing may wait for the end of a stream to be relayed.
// 16 clients at once share one upstream connection.
func TestGRPCStreamingThroughProxy(t *testing.T) {
	ca := tlstest.NewCA(t, "grpc CA")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{*ca.Server(t, "127.0.0.1").TLS}, NextProtos: []string{"h2"}}
	for _, tt := range []struct {
		name  string
		proto string
		tls   *TLS
		creds credentials.TransportCredentials
	}{
		{"h2c", ProtocolH2C, nil, insecure.NewCredentials()},
		{"h2", ProtocolH2, &TLS{Config: &tls.Config{RootCAs: ca.Pool()}}, credentials.NewTLS(serverTLS)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			counted := &countingListener{Listener: ln}
			var opts []grpc.ServerOption
			if tt.proto == ProtocolH2 {
				opts = append(opts, grpc.Creds(tt.creds))
			}
			gs := grpc.NewServer(opts...)
			testpb.RegisterTestServiceServer(gs, streamingService{})
			go gs.Serve(counted)
			t.Cleanup(gs.Stop)

			hs, _ := startH2(t, peers(h2Options(tt.proto, tt.tls), ln.Addr().String()), h2c())
			cc, err := grpc.NewClient(hs.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testpb.NewTestServiceClient(cc)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for c := 0; c < 16; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					in, err := client.StreamingInputCall(ctx)
					if err != nil {
						errs <- err
						return
					}
					for _, n := range []int{10, 200, 3000} {
						if err := in.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, n)}}); err != nil {
							errs <- err
							return
						}
					}
					sum, err := in.CloseAndRecv()
					if err != nil || sum.AggregatedPayloadSize != 3210 {
						errs <- fmt.Errorf("client stream: %v %v", sum, err)
						return
					}
					duplex, err := client.FullDuplexCall(ctx)
					if err != nil {
						errs <- err
						return
					}
					for _, n := range []int32{1, 1000, 100000} {
						req := &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: n}}}
						if err := duplex.Send(req); err != nil {
							errs <- err
							return
						}
						m, err := duplex.Recv() // before the next message goes
						if err != nil || int32(len(m.GetPayload().GetBody())) != n {
							errs <- fmt.Errorf("bidi stream: %d bytes for %d, %v", len(m.GetPayload().GetBody()), n, err)
							return
						}
					}
					duplex.CloseSend()
					if _, err := duplex.Recv(); err != io.EOF {
						errs <- fmt.Errorf("bidi stream's end: %v", err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := counted.n.Load(); n != 1 {
				t.Errorf("%d upstream connections for 16 clients' 32 calls, want 1", n)
			}
		})
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func TestParseGRPCTimeout(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1S", time.Second, true},
		{"250m", 250 * time.Millisecond, true},
		{"99999999H", 0, false}, // past a time.Duration: no deadline
		{"5", 0, false},
		{"123456789S", 0, false}, // more than 8 digits
		{"1x", 0, false},
		{"-1S", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseGRPCTimeout([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseGRPCTimeout(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestGRPCDeadline: a call's grpc-timeout (200 ms) bounds its wait for a
// server that does not answer, and the client gets DEADLINE_EXCEEDED, not
// the UNAVAILABLE of the peer's own response timeout (2 s here).
func TestGRPCDeadline(t *testing.T) {
	up := startH2Upstream(t, nil, nil, func(_ *h2.Conn, st *h2.Stream) { <-st.Done() })
	hs := start(t, peers(h2Options(ProtocolH2C, nil), up.addr()))
	resp, _ := hs.do(t, "POST /pkg.Svc/Call HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc\r\nGrpc-Timeout: 200m\r\nTE: trailers\r\nContent-Length: 5\r\n\r\n\x00\x00\x00\x00\x00")
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "4" {
		t.Errorf("%d, grpc-status %q (%q), want 200 with 4 (DEADLINE_EXCEEDED)", resp.StatusCode, resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message"))
	}
}
