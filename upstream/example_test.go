package upstream_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/upstream"
)

// A proxy for one upstream with sluice's own balancing and health: P2C over
// the primaries, passive and active health checks, and a backup that takes
// requests only when no primary is available.
func Example() {
	app := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, name)
		}))
	}
	primary, backup := app("primary"), app("backup")
	defer primary.Close()
	defer backup.Close()

	g := upstream.New("app", []*balance.Server{
		{Addr: primary.Listener.Addr().String()},
		{Addr: backup.Listener.Addr().String(), Backup: true},
	}, balance.P2C{}, balance.Options{
		MaxFails:    1, // one failure takes a server out for FailTimeout
		FailTimeout: 30 * time.Second,
		Active:      &balance.ActiveCheck{Path: "/", Interval: time.Second},
	}, &proxy.PeerOptions{ConnectTimeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g.Balancer().Start(ctx) // the active checks
	defer g.Balancer().Close()

	// The group is the Handler of a proxy of one upstream; for several, it
	// is a route.Route's Upstream (route.New).
	srv := &proxy.Server{Handler: g}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())

	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	// Output: 200 primary
}
