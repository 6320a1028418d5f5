// Package upstream is an upstream group: the servers of one upstream behind
// a balance.Group (a selection policy, passive and active health, backups,
// slow start, DNS), serving as proxy peers.
//
// Before each try of a request, the first and every retry, the proxy asks
// the group for a peer (Pick, a route.Picker; or UpstreamPeer, when the
// group is the proxy's whole Handler), and the group asks its balancer for
// a server this request has not failed on. After the try, the peer's Tag
// reports the outcome back to the balancer (Result says what it counts
// as), which is what passive health and the latency-aware policies see.
//
// It is what the config-driven binary builds for each entry under
// "upstreams", and what a library user builds to get the same balancing and
// health without the YAML file:
//
//	g := upstream.New("api", servers, balance.P2C{}, balance.Options{}, &proxy.PeerOptions{})
//	g.Balancer().Start(ctx) // active checks and DNS re-resolution; Close stops them
//	defer g.Balancer().Close()
//	srv := &proxy.Server{Handler: g} // or route.New(route.Route{Name: "api", Upstream: g}, ...)
package upstream
