package idempotency

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-proxy/sluice/internal/redistest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// client returns a client of the Redis at addr with timeout as its own
// timeouts and no retries (as sluice makes them), closed when the test
// ends.
func client(t testing.TB, addr string, timeout time.Duration) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: timeout, ReadTimeout: timeout,
		WriteTimeout: timeout, PoolTimeout: timeout, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialerRetries: 1, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// redisLayer makes a layer on its own client of the Redis at addr, as
// one sluice instance of a fleet.
func redisLayer(t testing.TB, addr string, o Options) (*Layer, *redis.Client) {
	timeout := time.Second
	if r, ok := o.Store.(*Redis); ok && r.Timeout > 0 {
		timeout = r.Timeout
	}
	c := client(t, addr, timeout)
	o.Store = &Redis{Client: c, Timeout: timeout}
	return newLayer(t, o), c
}

// TestRedisStore checks the Redis store's records: the two keys, their
// lifetimes, and each state.
func TestRedisStore(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv.Addr, time.Second)
	store := &Redis{Client: c, Prefix: "test:", Timeout: time.Second}
	ctx := context.Background()
	terms := Terms{Lease: 10 * time.Second, TTL: time.Hour}
	key, fp, token := Key{1, 2, 3}, Fingerprint{9}, newToken()
	keys := store.keys(key)
	if keys[0] != "test:{"+key.String()+"}:c" || keys[1] != "test:{"+key.String()+"}:r" {
		t.Errorf("keys %q", keys)
	}
	if f, err := store.Begin(ctx, key, fp, token, terms); err != nil || !f.Claimed || f.Prior != StateNone {
		t.Fatalf("Begin: %+v, %v", f, err)
	}
	if pttl := c.PTTL(ctx, keys[0]).Val(); pttl <= 9*time.Second || pttl > 10*time.Second {
		t.Errorf("the claim lives %v, want the lease", pttl)
	}
	if f, err := store.Begin(ctx, key, fp, newToken(), terms); err != nil || f.Claimed || f.State != StateInFlight || f.Mismatch {
		t.Errorf("Begin of a claimed key: %+v, %v", f, err)
	}
	if f, err := store.Begin(ctx, key, Fingerprint{8}, newToken(), terms); err != nil || f.Claimed || !f.Mismatch {
		t.Errorf("Begin with another payload: %+v, %v", f, err)
	}
	if _, err := store.End(ctx, key, fp, newToken(), StateKept, []byte("x"), terms); err != ErrLost {
		t.Errorf("End by another token: %v, want ErrLost", err)
	}
	answer := sample().Encode(nil)
	if s, err := store.End(ctx, key, fp, token, StateKept, answer, terms); err != nil || s != StateKept {
		t.Fatalf("End: %v, %v", s, err)
	}
	if n := c.Exists(ctx, keys[0]).Val(); n != 0 {
		t.Error("the claim outlived its end")
	}
	if pttl := c.PTTL(ctx, keys[1]).Val(); pttl <= 59*time.Minute || pttl > time.Hour {
		t.Errorf("the record lives %v, want the ttl", pttl)
	}
	f, err := store.Begin(ctx, key, fp, newToken(), terms)
	if err != nil || f.State != StateKept || string(f.Answer) != string(answer) {
		t.Fatalf("Begin of a kept key: %+v, %v", f, err)
	}

	// Unknown, then retaken; released.
	k2 := Key{2}
	t2 := newToken()
	store.Begin(ctx, k2, fp, t2, terms)
	store.End(ctx, k2, fp, t2, StateUnknown, nil, terms)
	if f, _ := store.Begin(ctx, k2, fp, newToken(), terms); f.State != StateUnknown || f.Claimed {
		t.Errorf("Begin of an unknown outcome: %+v", f)
	}
	retake := terms
	retake.Retake = true
	t3 := newToken()
	if f, _ := store.Begin(ctx, k2, fp, t3, retake); !f.Claimed || f.Prior != StateUnknown {
		t.Errorf("retaking an unknown outcome: %+v", f)
	}
	if s, err := store.End(ctx, k2, fp, t3, StateNone, nil, terms); err != nil || s != StateNone {
		t.Errorf("release: %v, %v", s, err)
	}
	if n := c.Exists(ctx, store.keys(k2)...).Val(); n != 0 {
		t.Errorf("%d keys left after a release", n)
	}

	// A holder that died: its claim key gone, its record in flight.
	k3 := Key{3}
	t4 := newToken()
	store.Begin(ctx, k3, fp, t4, terms)
	c.Del(ctx, store.keys(k3)[0])
	if f, _ := store.Begin(ctx, k3, fp, newToken(), terms); f.State != StateAbandoned {
		t.Errorf("Begin of an abandoned claim: %+v", f)
	}
	// Its renewal takes it back, nobody having retaken it.
	if ok, err := store.Renew(ctx, []Held{{k3, t4}, {k2, t4}}, terms); err != nil || !ok[0] || ok[1] {
		t.Errorf("Renew: %v, %v; want [true false]", ok, err)
	}
	// After SCRIPT FLUSH (a restarted server) the pipelined renewal
	// loads its script again.
	c.ScriptFlush(ctx)
	if ok, err := store.Renew(ctx, []Held{{k3, t4}}, terms); err != nil || !ok[0] {
		t.Errorf("Renew after SCRIPT FLUSH: %v, %v", ok, err)
	}
}

// TestRedisFleet checks that two layers, as two sluice instances with
// clients of their own, sharing one Redis behave as one: a claim by one
// is a 409 at the other, its kept answer is replayed by the other, and
// so on for each state.
func TestRedisFleet(t *testing.T) {
	srv := redistest.Start(t)
	a, _ := redisLayer(t, srv.Addr, Options{})
	b, _ := redisLayer(t, srv.Addr, Options{})
	d := begin(t, a, post("k", "x"), Claimed)
	begin(t, b, post("k", "x"), InFlight)
	begin(t, b, post("k", "y"), Mismatch)
	if err := d.Claim.Keep(sample()); err != nil {
		t.Fatal(err)
	}
	checkReplay(t, begin(t, b, post("k", "x"), Replayed), sample())
	checkReplay(t, begin(t, a, post("k", "x"), Replayed), sample())

	d = begin(t, b, post("u", "x"), Claimed)
	begin(t, a, post("u", "x"), InFlight)
	d.Claim.Unknown()
	begin(t, a, post("u", "x"), Unknown)

	d = begin(t, a, post("r", "x"), Claimed)
	d.Claim.Keep(&Answer{Status: 503})
	begin(t, b, post("r", "x"), Claimed).Claim.Release()
	begin(t, a, post("r", "x"), Claimed).Claim.Release()

	big, _ := redisLayer(t, srv.Addr, Options{MaxResponse: 100})
	begin(t, big, post("big", "x"), Claimed).Claim.Keep(&Answer{Status: 200, Body: make([]byte, 200)})
	begin(t, a, post("big", "x"), NotKept)
}

// TestRedisLease checks leases in Redis with a short one: a holder that
// renews keeps its claim for many leases; one that died (its client
// killed, its claim left in Redis) loses it within the lease plus the
// time to notice, and the next retry is told the outcome is unknown.
// Redis expires keys on its own clock, which synctest cannot fake, so the
// test waits for what Redis shows (the claim's expiry moved, the claim
// gone); the renewals' schedule is TestLeaseRenewed's, on synctest's
// clock.
func TestRedisLease(t *testing.T) {
	srv := redistest.Start(t)
	// A second: renewals every third of it, so that only a renewal held
	// up by two thirds of a second (a loaded machine running the race
	// detector held one up by 430 ms at a lease of 300) lets the claim
	// lapse.
	const lease = time.Second
	o := Options{Lease: lease, TTL: time.Minute}
	a, ac := redisLayer(t, srv.Addr, o)
	b, _ := redisLayer(t, srv.Addr, o)

	// Renewed: each renewal moves the claim's expiry in Redis on to a
	// lease from when it ran, which was before the expiry it replaced
	// (else the claim lapsed in between, and was held again); the claim
	// is in flight at b after each, until it has outlived four leases.
	d := begin(t, a, post("live", "x"), Claimed)
	claimKey := a.store.(*Redis).keys(d.Claim.key)[0]
	expiry := func() time.Duration { return ac.PExpireTime(context.Background(), claimKey).Val() }
	first := expiry()
	if first <= 0 {
		t.Fatalf("the claim's expiry in Redis: %v", first)
	}
	for last := first; last < first+4*lease; {
		prev := last
		wait.For(t, "a renewal to move the claim's expiry on", func() bool { last = expiry(); return last > prev })
		if last-lease > prev {
			t.Fatalf("the claim lapsed for %v before a renewal", last-lease-prev)
		}
		begin(t, b, post("live", "x"), InFlight)
	}
	if d.Claim.Lost() {
		t.Error("a renewed claim was lost")
	}
	d.Claim.Keep(sample())
	begin(t, b, post("live", "x"), Replayed)

	// A holder whose process died: its client closed under its claim.
	dying, dc := redisLayer(t, srv.Addr, o)
	claimed := time.Now() // before Begin: the claim cannot end sooner than a lease after it
	d = begin(t, dying, post("dead", "x"), Claimed)
	dc.Close()
	var got Decision
	wait.Within(t, lease+5*time.Second, "the dead holder's claim to end", func() bool {
		got = b.Begin(context.Background(), post("dead", "x"))
		return got.Outcome != InFlight
	})
	since := time.Since(claimed)
	if got.Outcome != Unknown {
		t.Fatalf("after the holder died: %v, want unknown", got.Outcome)
	}
	t.Logf("a dead holder's claim ended %v after it was made (lease %v)", since, lease)
	if since < lease || since > lease+time.Second {
		t.Errorf("the claim ended after %v, want between the lease and the lease plus a second", since)
	}
	if err := d.Claim.Keep(sample()); err == nil {
		t.Error("the dead holder's Keep succeeded with its client closed")
	}
	if c := dying.Counts(); c.StoreErrors == 0 {
		t.Errorf("the dead holder's store errors were not counted: %+v", c)
	}
}

// TestRedisDown kills Redis mid-run, and puts a server that accepts and
// never answers in its place for another layer: every request is
// answered as on_store_error says (503, or forwarded without the layer)
// within the store's timeout, and the claims live when Redis died end
// with a store error, counted.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	held := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				close(held)
				return
			}
			held <- c
		}
	}()
	defer func() {
		silent.Close()
		for c := range held {
			c.Close()
		}
	}()

	const timeout = 50 * time.Millisecond
	store := func() *Redis { return &Redis{Timeout: timeout} }
	deny, _ := redisLayer(t, srv.Addr, Options{Store: store()})
	allow, _ := redisLayer(t, srv.Addr, Options{Store: store(), OnStoreError: Allow})
	silentDeny, _ := redisLayer(t, silent.Addr().String(), Options{Store: store()})
	// With Redis up: decided by it. (The first requests may take longer
	// than 50ms on a loaded machine: a new connection, the script's
	// first EVAL.)
	var live *Claim
	for live == nil {
		if d := deny.Begin(context.Background(), post("live", "x")); d.Claim != nil {
			live = d.Claim
		}
	}
	srv.Kill()
	cases := []struct {
		name  string
		l     *Layer
		want  Outcome
		worst time.Duration
	}{{"killed, deny", deny, StoreDenied, 0}, {"killed, allow", allow, Bypassed, 0}, {"silent, deny", silentDeny, StoreDenied, 0}}
	for i := range 5 {
		for j := range cases {
			c := &cases[j]
			start := time.Now()
			d := c.l.Begin(context.Background(), post("k"+string(rune('0'+i)), "x"))
			took := time.Since(start)
			c.worst = max(c.worst, took)
			if d.Outcome != c.want {
				t.Errorf("%s: %v, want %v", c.name, d.Outcome, c.want)
			}
			if took > timeout+time.Second {
				t.Errorf("%s: answered after %v, want within %v (and slack)", c.name, took, timeout)
			}
		}
	}
	for _, c := range cases {
		t.Logf("Redis %s: the slowest of 5 decisions took %v (timeout %v)", c.name, c.worst, timeout)
	}
	start := time.Now()
	if err := live.Keep(sample()); err == nil {
		t.Error("a Keep with Redis down succeeded")
	}
	t.Logf("a Keep with Redis down failed after %v", time.Since(start))
	for _, l := range []*Layer{deny, allow, silentDeny} {
		if c := l.Counts(); c.StoreErrors < 5 {
			t.Errorf("%+v: store errors not counted", c)
		}
	}
}
