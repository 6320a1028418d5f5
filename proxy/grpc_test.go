package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
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
