// Command postretry shows the ErrorWhileProxy hook: it lets sluice retry
// POST requests to one path whose upstream handler is known to be
// idempotent (it deduplicates by content), and leaves every other POST to
// the default policy, which never resends a POST that may have been
// processed unless it carries an Idempotency-Key.
//
//	go run ./examples/postretry -listen 127.0.0.1:8080 -upstream 127.0.0.1:9001
package main

import (
	"flag"
	"log"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/proxy"
)

// SafePath is the one path whose POSTs may be resent.
const SafePath = "/search"

// Proxy sends everything to one upstream.
type Proxy struct{ Peer *proxy.Peer }

func (p *Proxy) UpstreamPeer(*proxy.Session) (*proxy.Peer, error) { return p.Peer, nil }

// ErrorWhileProxy sees each failure after the connection was made, with
// sluice's decision already in e.Retry and e.Why. It turns a "no" into a
// "yes" only for POST /search; tries and the retry budget still bound it.
func (p *Proxy) ErrorWhileProxy(s *proxy.Session, peer *proxy.Peer, e *fault.Error, reused bool) *fault.Error {
	if !e.Retry && s.Request.Method() == "POST" && string(s.Request.Path()) == SafePath && e.Kind != fault.UpstreamStatus {
		e.Retry, e.Why = true, "retrying: POST "+SafePath+" is idempotent by design"
	}
	return e
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	upstream := flag.String("upstream", "127.0.0.1:9001", "upstream address")
	flag.Parse()
	srv := &proxy.Server{Handler: &Proxy{Peer: &proxy.Peer{Addr: *upstream, Options: &proxy.PeerOptions{}}}}
	log.Fatal(srv.ListenAndServe(*listen))
}
