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
	"github.com/sluice-proxy/sluice/retry"
)

// SafePath is the one path whose POSTs may be resent.
const SafePath = "/search"

// Proxy sends everything to one upstream.
type Proxy struct{ Peer *proxy.Peer }

func (p *Proxy) UpstreamPeer(*proxy.Session) (*proxy.Peer, error) { return p.Peer, nil }

// The hook is found by type assertion: this line makes a wrong signature a
// compile error instead of a hook that is silently never called.
var _ proxy.ErrorWhileProxy = (*Proxy)(nil)

// ErrorWhileProxy sees each failure after the connection was made, with
// the policy's decision already in e.Retry and e.Why and the facts of the
// wire in f. It turns a "no" into a "yes" only for a POST /search that
// failed on the connection (not with a status), the refusal a POST gets
// because it may have been processed. It need not check that the body is
// still held whole, that tries or the retry budget are left: sluice applies
// those limits after every hook, and nothing lifts them.
func (p *Proxy) ErrorWhileProxy(s *proxy.Session, peer *proxy.Peer, e *fault.Error, f retry.Facts) *fault.Error {
	if !e.Retry && f.Method == "POST" && string(s.Request.Path()) == SafePath && e.Kind != fault.UpstreamStatus {
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
