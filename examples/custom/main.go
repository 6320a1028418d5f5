// Command custom is a proxy built on the sluice library in a few lines: it
// answers /healthz itself, sends requests carrying "X-Tenant: beta" to a
// separate upstream, and tags every request it forwards.
//
//	go run ./examples/custom -listen 127.0.0.1:8080 -stable 127.0.0.1:9001 -beta 127.0.0.1:9002
package main

import (
	"flag"
	"log"
	"time"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
)

// Gateway decides where each request goes. UpstreamPeer is the one method a
// proxy must have; RequestFilter and UpstreamRequestFilter are optional
// hooks sluice finds by type assertion.
type Gateway struct {
	Stable, Beta *proxy.Peer
}

// UpstreamPeer routes by header. It is asked again before every retry.
func (g *Gateway) UpstreamPeer(s *proxy.Session) (*proxy.Peer, error) {
	if h1.EqualFold(s.Request.Header.Get("X-Tenant"), "beta") {
		return g.Beta, nil
	}
	return g.Stable, nil
}

// RequestFilter answers health checks without bothering an upstream.
func (g *Gateway) RequestFilter(s *proxy.Session) *proxy.Response {
	if string(s.Request.Path()) == "/healthz" {
		return proxy.Text(200, "ok\n")
	}
	return nil
}

// UpstreamRequestFilter adds a header to what goes upstream, on every try.
func (g *Gateway) UpstreamRequestFilter(s *proxy.Session, p *proxy.Peer, req *h1.Request) {
	req.Header.Set("X-Proxied-By", "custom-sluice")
}

// NewGateway returns a Gateway for the two upstream addresses.
func NewGateway(stable, beta string) *Gateway {
	opts := &proxy.PeerOptions{
		ConnectTimeout:        time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		Pool:                  &pool.Limits{MaxIdle: 16, IdleTimeout: 30 * time.Second},
	}
	return &Gateway{
		Stable: &proxy.Peer{Addr: stable, Options: opts},
		Beta:   &proxy.Peer{Addr: beta, Options: opts},
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	stable := flag.String("stable", "127.0.0.1:9001", "stable upstream")
	beta := flag.String("beta", "127.0.0.1:9002", "beta upstream")
	flag.Parse()
	srv := &proxy.Server{Handler: NewGateway(*stable, *beta)}
	log.Fatal(srv.ListenAndServe(*listen))
}
