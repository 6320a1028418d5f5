// Command grpcload measures what a unary gRPC call costs through the
// sluice binary, beside the same call made directly:
//
//	go run ./bench/grpcload [-calls 40000] [-clients 16] [-sluice BIN] [-keep]
//
// It serves grpc-go's health service on 127.0.0.1, runs sluice with an h2c
// listener in front of it (upstream protocol h2c), and makes -calls Check
// calls from -clients concurrent gRPC clients (each its own connection),
// first directly, then through sluice. It prints, for each, calls per
// second, errors and this process's CPU per call (the clients and the
// server, which run here), and for sluice its own CPU per call and how
// many connections it opened to the server (HTTP/2 multiplexes every
// client's calls on as few as the server's stream limit allows). When
// haproxy is on the PATH, the same load goes through it too (h2c on both
// sides, its defaults otherwise), with its CPU per call in sluice's
// column, for a figure beside sluice's. Linux only (/proc); everything
// listens on 127.0.0.1.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-proxy/sluice/bench/internal/rig"
)

func main() {
	calls := flag.Int("calls", 40000, "unary calls per run")
	clients := flag.Int("clients", 16, "concurrent clients, each on its own connection")
	bin := flag.String("sluice", "", "sluice `binary` (default: build ./cmd/sluice into the temp dir)")
	keep := flag.Bool("keep", false, "keep the temp dir (config and log) and print its path")
	flag.Parse()
	if err := run(*calls, *clients, *bin, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "grpcload:", err)
		os.Exit(1)
	}
}

// countingListener counts the connections the server accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func run(calls, clients int, bin string, keep bool) error {
	dir, remove, err := rig.TempDir("grpcload", keep)
	if err != nil {
		return err
	}
	defer remove()
	bin, err = rig.Binary(bin, dir)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	server := &countingListener{Listener: ln}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("orders", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(server)
	defer gs.Stop()

	addr := fmt.Sprintf("127.0.0.1:%d", rig.FreePort())
	cfg := fmt.Sprintf(`listen:
  - {address: %q, protocols: [http/1.1, h2c]}
access_log: {enabled: false}
log: {level: error}
routes: [{upstream: grpc}]
upstreams:
  grpc:
    protocol: h2c
    servers: [{address: %q}]
`, addr, ln.Addr().String())
	sl, err := rig.Start(bin, filepath.Join(dir, "run"), addr, cfg)
	if err != nil {
		return err
	}
	defer sl.Stop()
	ctx := context.Background()
	if err := sl.WaitServing(ctx, func() error { _, err := load(addr, 1, 1); return err }); err != nil {
		return err
	}

	type path struct {
		name, target string
		pid          int // the proxy's; 0: none
	}
	paths := []path{{"direct", ln.Addr().String(), 0}, {"through sluice", addr, sl.Pid}}
	if hp, err := exec.LookPath("haproxy"); err == nil {
		haddr := fmt.Sprintf("127.0.0.1:%d", rig.FreePort())
		h, err := startHAProxy(hp, dir, haddr, ln.Addr().String())
		if err != nil {
			return err
		}
		defer func() { h.Process.Kill(); h.Wait() }()
		if err := sl.WaitServing(ctx, func() error { _, err := load(haddr, 1, 1); return err }); err != nil {
			return fmt.Errorf("haproxy: %w", err)
		}
		paths = append(paths, path{"through HAProxy", haddr, h.Process.Pid})
	} else {
		fmt.Fprintln(os.Stderr, "grpcload: no haproxy on the PATH (apt-get install -y haproxy): its row is left out")
	}

	fmt.Printf("%d unary calls (grpc.health.v1.Health/Check) from %d clients, each on its own connection\n\n", calls, clients)
	fmt.Println("| path | calls/s | errors | this process CPU µs/call (clients + server) | proxy CPU µs/call | connections to the server |")
	fmt.Println("|---|--:|--:|--:|--:|--:|")
	for _, path := range paths {
		load(path.target, clients, clients*50) // warm-up
		before := server.n.Load()
		self0, _ := rig.CPUSeconds(os.Getpid())
		px0, _ := rig.CPUSeconds(path.pid)
		t0 := time.Now()
		errs, err := load(path.target, clients, calls)
		if err != nil && errs == 0 {
			return err
		}
		took := time.Since(t0)
		self1, _ := rig.CPUSeconds(os.Getpid())
		pxCPU := "—"
		if path.pid != 0 {
			px1, _ := rig.CPUSeconds(path.pid)
			pxCPU = fmt.Sprintf("%.1f", (px1-px0)/float64(calls)*1e6)
		}
		fmt.Printf("| %s | %.0f | %d | %.1f | %s | %d |\n", path.name, float64(calls)/took.Seconds(), errs,
			(self1-self0)/float64(calls)*1e6, pxCPU, server.n.Load()-before)
	}
	fmt.Println("\nThe clients' connections to the server count in the direct row; a proxy's, opened at its warm-up calls, may not show in its row.")
	return nil
}

// startHAProxy runs haproxy in the foreground with a config in dir that
// takes h2c on addr and passes every request to upstream over h2c,
// reusing its connections as sluice does. It gets SIGKILL should this
// program die first.
func startHAProxy(bin, dir, addr, upstream string) (*exec.Cmd, error) {
	cfg := fmt.Sprintf(`defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend grpc
  bind %s proto h2
  default_backend grpc
backend grpc
  http-reuse always
  server s1 %s proto h2
`, addr, upstream)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-f", path, "-db")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, cmd.Start()
}

// load makes calls Check calls to target from clients concurrent clients,
// each with a connection of its own, and returns how many failed.
func load(target string, clients, calls int) (int, error) {
	var failed atomic.Int64
	var first atomic.Value
	var next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, err
		}
		defer cc.Close()
		client := healthpb.NewHealthClient(cc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(calls) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "orders"})
				cancel()
				if err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if e, ok := first.Load().(error); ok {
		return int(failed.Load()), e
	}
	return 0, nil
}
