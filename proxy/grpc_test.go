package proxy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

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
