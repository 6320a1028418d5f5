package config

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/idempotency"
	"github.com/sluice-proxy/sluice/internal/redistest"
	"github.com/sluice-proxy/sluice/proxy"
)

// keyedPost is a session of a POST to /api/orders with key, as the engine
// holds one, and the idempotency request it hands Begin.
func keyedPost(t *testing.T, key string) (*proxy.Session, *idempotency.Request) {
	t.Helper()
	s := new(proxy.Session)
	raw := "POST /api/orders HTTP/1.1\r\nHost: api.example.com\r\nIdempotency-Key: " + key + "\r\n\r\n"
	if err := h1.ParseRequest(&s.Request, []byte(raw), 10); err != nil {
		t.Fatal(err)
	}
	s.ClientIP = netip.MustParseAddr("192.0.2.1")
	return s, &idempotency.Request{Method: "POST", Target: s.Request.Target(), Header: &s.Request.Header,
		ClientIP: s.ClientIP, Body: new(idempotency.BodyDigest)}
}

// TestBuildIdempotency checks that a route's idempotency section becomes
// its layer, found through the table as the engine will find it, with
// the section's settings; that a reload's generation answers from the
// old one's local records (Carry); and that the counts are reported.
func TestBuildIdempotency(t *testing.T) {
	yaml := "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nroutes:\n" +
		"  - {path_prefix: /api/, upstream: app, idempotency: {methods: [POST], max_response: 0, scope: [route]}}\n" +
		"  - {upstream: app}\n" +
		"upstreams:\n  app:\n    servers: [{address: \"127.0.0.1:9\"}]\n"
	build := func() *Generation {
		cfg, err := Parse("t.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		g, err := Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		return g
	}
	g1 := build()
	_, r := keyedPost(t, "k")
	l := g1.layers["*/api/"]
	if l == nil || l.Name() != "*/api/" || l.Header() != "Idempotency-Key" || !l.Handles("POST") || l.Handles("PATCH") {
		t.Fatalf("the /api/ route's layer: %+v", l)
	}
	if len(g1.layers) != 1 {
		t.Errorf("%d layers, want the /api/ route's only", len(g1.layers))
	}
	d := l.Begin(context.Background(), r)
	if d.Outcome != idempotency.Claimed {
		t.Fatalf("Begin: %v", d.Outcome)
	}
	// max_response: 0 keeps only answers of no bytes: this one is not.
	d.Claim.Keep(&idempotency.Answer{Status: 201, Body: []byte("created")})
	if d := l.Begin(context.Background(), r); d.Outcome != idempotency.NotKept {
		t.Errorf("after an answer with a body: %v, want not kept", d.Outcome)
	}

	g2 := build()
	g2.Carry(g1)
	g1.Close()
	_, r = keyedPost(t, "k")
	if d := g2.layers["*/api/"].Begin(context.Background(), r); d.Outcome != idempotency.NotKept {
		t.Errorf("after the reload: %v, want not kept (the record carried over)", d.Outcome)
	}
	got := map[string]idempotency.Counts{}
	g2.Idempotency(func(route string, c idempotency.Counts) { got[route] = c })
	if len(got) != 1 || got["*/api/"] != (idempotency.Counts{Claimed: 1, NotKept: 1, Conflicts: 2}) {
		t.Errorf("counts: %+v", got)
	}
}

// TestBuildIdempotencyRedis checks store: redis: the layers of two
// generations (two sluice instances) share records; a generation closed
// with a claim live keeps its Redis client until the claim ends, so the
// answer is kept; then the client is closed.
func TestBuildIdempotencyRedis(t *testing.T) {
	srv := redistest.Start(t)
	yaml := "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\n" +
		"redis: {address: \"" + srv.Addr + "\", timeout: 1s}\nroutes:\n" +
		"  - {path_prefix: /api/, upstream: app, idempotency: {store: redis}}\n" +
		"upstreams:\n  app:\n    servers: [{address: \"127.0.0.1:9\"}]\n"
	build := func() *Generation {
		cfg, err := Parse("t.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		g, err := Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a, b := build(), build()
	defer b.Close()
	layer := func(g *Generation) *idempotency.Layer { return g.layers["*/api/"] }
	_, r := keyedPost(t, "k")
	d := layer(a).Begin(context.Background(), r)
	if d.Outcome != idempotency.Claimed {
		t.Fatalf("Begin at a: %v %v", d.Outcome, d.Err)
	}
	if d := layer(b).Begin(context.Background(), r); d.Outcome != idempotency.InFlight {
		t.Errorf("Begin at b while a runs: %v", d.Outcome)
	}
	client := a.idemRedis
	a.Close()
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("a's client was closed with a claim live: %v", err)
	}
	if err := d.Claim.Keep(&idempotency.Answer{Status: 201, Body: []byte("created")}); err != nil {
		t.Fatalf("Keep after a's Close: %v", err)
	}
	if d := layer(b).Begin(context.Background(), r); d.Outcome != idempotency.Replayed || string(d.Answer.Body) != "created" {
		t.Errorf("Begin at b after a kept: %v", d.Outcome)
	}
	deadline := time.Now().Add(5 * time.Second)
	for client.Ping(context.Background()).Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("a's client is still open after its last claim ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := client.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("a's client: %v, want closed", err)
	}
}
