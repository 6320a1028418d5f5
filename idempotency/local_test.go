package idempotency

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

// TestLeaseRenewed checks, in a bubble of fake time, that a claim whose
// request runs for many leases stays claimed (renewed by the layer),
// and that its renewal ends with it: the bubble ends only when no
// goroutine is left.
func TestLeaseRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLayer(t, Options{Lease: 3 * time.Second, TTL: time.Minute})
		d := begin(t, l, post("k", "x"), Claimed)
		for range 10 {
			time.Sleep(2 * time.Second)
			begin(t, l, post("k", "x"), InFlight)
		}
		if d.Claim.Lost() {
			t.Error("a renewed claim was lost")
		}
		d.Claim.Keep(sample())
		// The renewer's timer fires once more, finds no claim, and is not
		// armed again: nothing of it runs (synctest.Wait returns once no
		// goroutine of the bubble can run).
		time.Sleep(time.Second)
		synctest.Wait()
		l.renewer.mu.Lock()
		armed, n := l.renewer.armed, l.renewer.n
		l.renewer.mu.Unlock()
		if armed || n != 0 {
			t.Errorf("the renewer with no claim: armed %v, %d claims", armed, n)
		}
		begin(t, l, post("k", "x"), Replayed)
		// The record lives for the ttl after the answer, not after the
		// claim.
		time.Sleep(time.Minute - 2*time.Second)
		begin(t, l, post("k", "x"), Replayed)
		time.Sleep(time.Second)
		begin(t, l, post("k", "x"), Claimed).Claim.Release()
	})
}

// TestHolderStopsRenewing checks that a claim its holder stopped renewing
// (a claim made on the store directly, as a holder that died leaves it)
// is in flight until its lease ends, then abandoned: a retry is told the
// outcome is unknown, or retakes it with UnknownOutcome Forward; the
// holder's late end then writes nothing (ErrLost).
func TestHolderStopsRenewing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := NewLocal(0, 0)
		l := newLayer(t, Options{Store: store, Lease: 30 * time.Second, TTL: time.Hour})
		retaker := newLayer(t, Options{Store: store, Lease: 30 * time.Second, TTL: time.Hour, UnknownOutcome: Forward})
		r := post("k", "x")
		key := makeKey(l.scope, l.name, r.ClientIP, r.Header, []byte("k"))
		fp := fingerprint(r)
		dead := newToken()
		f, err := store.Begin(context.Background(), key, fp, dead, l.terms)
		if err != nil || !f.Claimed {
			t.Fatalf("Begin: %+v, %v", f, err)
		}
		time.Sleep(30*time.Second - time.Millisecond)
		begin(t, l, post("k", "x"), InFlight)
		time.Sleep(time.Millisecond)
		begin(t, l, post("k", "x"), Unknown)
		d := begin(t, retaker, post("k", "x"), Retaken)
		if _, err := store.End(context.Background(), key, fp, dead, StateKept, sample().Encode(nil), l.terms); err != ErrLost {
			t.Errorf("the dead holder's late end: %v, want ErrLost", err)
		}
		// A renewal by the dead holder does not take the claim back.
		if ok, _ := store.Renew(context.Background(), []Held{{key, dead}}, l.terms); ok[0] {
			t.Error("the dead holder renewed a retaken claim")
		}
		d.Claim.Keep(sample())
		begin(t, l, post("k", "x"), Replayed)
	})
}

// TestLapsedClaimRenewed checks that a claim whose lease ran out while
// nobody retook its key is held again by the next renewal (nothing acted
// on its lapse), and that one retaken meanwhile is lost.
func TestLapsedClaimRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := NewLocal(0, 0)
		terms := Terms{Lease: time.Second, TTL: time.Minute, Retake: true}
		a, b := Key{1}, Key{2}
		ta, tb := newToken(), newToken()
		store.Begin(context.Background(), a, Fingerprint{}, ta, terms)
		store.Begin(context.Background(), b, Fingerprint{}, tb, terms)
		time.Sleep(2 * time.Second)
		if f, _ := store.Begin(context.Background(), b, Fingerprint{}, newToken(), terms); !f.Claimed || f.Prior != StateAbandoned {
			t.Fatalf("retaking the lapsed claim: %+v", f)
		}
		ok, err := store.Renew(context.Background(), []Held{{a, ta}, {b, tb}}, terms)
		if err != nil || !ok[0] || ok[1] {
			t.Fatalf("Renew: %v, %v; want [true false]", ok, err)
		}
		if f, _ := store.Begin(context.Background(), a, Fingerprint{}, newToken(), terms); f.Claimed || f.State != StateInFlight {
			t.Errorf("after its renewal the lapsed claim is %+v, want in flight", f)
		}
	})
}

// TestLocalBounds checks a full local store: a new key is a store error
// (ErrFull, the request follows on_store_error) until records expire;
// an answer past the byte bound is kept as not kept.
func TestLocalBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := NewLocal(localShards, 2000) // one record per shard
		l := newLayer(t, Options{Store: store, Lease: time.Second, TTL: time.Minute})
		// Fill every shard: new keys, those of a full shard failing, until
		// every shard is full (which shard a key goes to is the store's
		// secret: some fail early).
		var claims []*Claim
		full := 0
		for i := 0; len(claims) < localShards; i++ {
			if i == 100_000 {
				t.Fatalf("%d keys claimed of %d, %d refused", len(claims), i, full)
			}
			d := l.Begin(context.Background(), post("k"+strconv.Itoa(i), "x"))
			switch d.Outcome {
			case Claimed:
				claims = append(claims, d.Claim)
			case StoreDenied:
				if d.Err != ErrFull {
					t.Fatalf("a full store: %v, want ErrFull", d.Err)
				}
				full++
			default:
				t.Fatalf("Begin: %v", d.Outcome)
			}
		}
		if full == 0 {
			t.Error("no key refused by a full shard")
		}
		if store.Len() > localShards {
			t.Errorf("%d records in a store of %d", store.Len(), localShards)
		}
		// Answers: those within the byte bound are kept, the next that do
		// not fit are not.
		for _, c := range claims {
			c.Keep(&Answer{Status: 200, Body: make([]byte, 600)})
		}
		kept, notKept := l.Counts().Kept, l.Counts().NotKept
		if kept == 0 || notKept == 0 || kept+notKept != uint64(len(claims)) || store.Bytes() > 2000 {
			t.Errorf("kept %d, not kept %d of %d answers, %d bytes held; want some of each within 2000 bytes", kept, notKept, len(claims), store.Bytes())
		}
		// Once the records expire, their room is free again: keys, and
		// bytes (from every shard, not only the one of the new key).
		time.Sleep(time.Minute)
		begin(t, l, post("late", "x"), Claimed).Claim.Keep(&Answer{Status: 200, Body: make([]byte, 1500)})
		if c := l.Counts(); c.Kept != kept+1 || store.Bytes() > 2000 {
			t.Errorf("after the others expired, a 1500-byte answer: %+v, %d bytes held", c, store.Bytes())
		}
	})
}

// TestCarryBounds checks that a reload's new bounds apply to the local
// store it carries over.
func TestCarryBounds(t *testing.T) {
	old := newLayer(t, Options{Store: NewLocal(1000, 1<<20)})
	l := newLayer(t, Options{Store: NewLocal(localShards, 1<<10)})
	l.Carry(old)
	s := l.store.(*Local)
	if s != old.store || s.perShard.Load() != 1 || s.maxBytes.Load() != 1<<10 {
		t.Errorf("carried store: %d per shard, %d bytes; want 1 and 1024", s.perShard.Load(), s.maxBytes.Load())
	}
}

// TestLocalRequeue checks that a claim ended before another record of its
// shard was queued leaves one entry in the shard's queue (End's takes the
// place of Begin's), that one ended after leaves both, and that each
// record expires at its own time either way.
func TestLocalRequeue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewLocal(0, 0)
		ctx := context.Background()
		terms := Terms{Lease: time.Second, TTL: time.Minute}
		var fp Fingerprint
		// Keys of one shard.
		var keys []Key
		for i := 0; len(keys) < 3; i++ {
			k := Key{byte(i), byte(i >> 8)}
			if len(keys) == 0 || s.shard(s.hash(&k)) == s.shard(s.hash(&keys[0])) {
				keys = append(keys, k)
			}
		}
		sh := s.shard(s.hash(&keys[0]))
		queued := func() int { return len(sh.queue) - sh.head }
		begin := func(k Key, tok byte) {
			if f, err := s.Begin(ctx, k, fp, Token{tok}, terms); err != nil || !f.Claimed {
				t.Fatalf("Begin: %+v, %v", f, err)
			}
		}
		end := func(k Key, tok byte) {
			if _, err := s.End(ctx, k, fp, Token{tok}, StateUnknown, nil, terms); err != nil {
				t.Fatalf("End: %v", err)
			}
		}
		begin(keys[0], 1)
		time.Sleep(time.Second / 2)
		end(keys[0], 1)
		if n := queued(); n != 1 {
			t.Errorf("a claim begun and ended alone: %d entries queued, want 1", n)
		}
		time.Sleep(time.Second)
		begin(keys[1], 2)
		time.Sleep(time.Second)
		begin(keys[2], 3)
		end(keys[1], 2)
		if n := queued(); n != 4 {
			t.Errorf("a claim ended after another was queued: %d entries queued, want 4", n)
		}
		// keys[0] expires a minute after its End (0.5 s), keys[1] a
		// minute after its own (2.5 s).
		time.Sleep(time.Minute - 2500*time.Millisecond) // at 60 s
		if f, _ := s.Begin(ctx, keys[0], fp, Token{4}, terms); f.Claimed || f.State != StateUnknown {
			t.Errorf("keys[0] before its time: %+v", f)
		}
		time.Sleep(time.Second) // 61 s
		if f, _ := s.Begin(ctx, keys[0], fp, Token{5}, terms); !f.Claimed {
			t.Errorf("keys[0] after its time: %+v, want claimed", f)
		}
		if f, _ := s.Begin(ctx, keys[1], fp, Token{6}, terms); f.Claimed || f.State != StateUnknown {
			t.Errorf("keys[1] before its time: %+v", f)
		}
		time.Sleep(2 * time.Second) // 63 s
		if f, _ := s.Begin(ctx, keys[1], fp, Token{7}, terms); !f.Claimed {
			t.Errorf("keys[1] after its time: %+v, want claimed", f)
		}
	})
}
