package acme

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-proxy/sluice/internal/acmetest"
	"github.com/sluice-proxy/sluice/internal/redistest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

func testKey(b byte) [32]byte {
	var k [32]byte
	for i := range k {
		k[i] = b + byte(i)
	}
	return k
}

// redisStore makes a storage in the Redis at addr, on a client of its own
// closed when the test ends.
func redisStore(t *testing.T, addr string, key [32]byte) (*redisStorage, *redis.Client) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	s, err := newRedisStorage(c, "test:", key)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// TestRedisStorage checks the storage's keys and values as certmagic uses
// them: names as paths, directories as their prefixes, values encrypted
// and bound to their names.
func TestRedisStorage(t *testing.T) {
	srv := redistest.Start(t)
	s, c := redisStore(t, srv.Addr, testKey(1))
	ctx := context.Background()
	files := map[string]string{
		"acme/ca/users/ops/ops.key":               "-----BEGIN EC PRIVATE KEY-----\nsecret\n",
		"acme/ca/users/ops/ops.json":              `{"email":"ops"}`,
		"certificates/ca/a.test/a.test.crt":       "cert a",
		"certificates/ca/a.test/a.test.key":       "key a",
		"certificates/ca/b.test/b.test.crt":       "cert b",
		"ocsp/a.test-0123":                        "staple",
		"certificates/ca/a.test/a.test.json":      "{}",
		"certificates/ca/b.test/b.test.key":       "key b",
		"certificates/ca/b.test/deeper/more/file": "x",
	}
	for name, v := range files {
		if err := s.Store(ctx, name, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range files {
		if got, err := s.Load(ctx, name); err != nil || string(got) != v {
			t.Errorf("Load(%s) = %q, %v", name, got, err)
		}
	}
	if _, err := s.Load(ctx, "certificates/ca/c.test/c.test.crt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing name: %v, want fs.ErrNotExist", err)
	}
	// The server holds no value in the clear.
	raw, err := c.HGet(ctx, "test:k:acme/ca/users/ops/ops.key", "v").Bytes()
	if err != nil || strings.Contains(string(raw), "PRIVATE KEY") || strings.Contains(string(raw), "secret") {
		t.Errorf("the stored key: %q, %v", raw, err)
	}
	// Another fleet's key opens nothing; a value moved to another name
	// does not open either.
	other, _ := redisStore(t, srv.Addr, testKey(2))
	if _, err := other.Load(ctx, "acme/ca/users/ops/ops.key"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load with another key: %v, want an error", err)
	}
	c.HSet(ctx, "test:k:certificates/ca/a.test/a.test.key", "v", raw)
	if _, err := s.Load(ctx, "certificates/ca/a.test/a.test.key"); err == nil {
		t.Error("a value moved to another name opened")
	}

	for _, tt := range []struct {
		dir       string
		recursive bool
		want      []string
	}{
		{"certificates/ca", false, []string{"certificates/ca/a.test", "certificates/ca/b.test"}},
		{"certificates/ca/b.test", false, []string{"certificates/ca/b.test/b.test.crt", "certificates/ca/b.test/b.test.key", "certificates/ca/b.test/deeper"}},
		{"certificates/ca/b.test/", true, []string{"certificates/ca/b.test/b.test.crt", "certificates/ca/b.test/b.test.key",
			"certificates/ca/b.test/deeper", "certificates/ca/b.test/deeper/more", "certificates/ca/b.test/deeper/more/file"}},
		{"", false, []string{"acme", "certificates", "ocsp"}},
	} {
		got, err := s.List(ctx, tt.dir, tt.recursive)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("List(%q, %v) = %q, %v; want %q", tt.dir, tt.recursive, got, err, tt.want)
		}
	}
	if _, err := s.List(ctx, "nothing", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List of nothing: %v", err)
	}
	if ki, err := s.Stat(ctx, "ocsp/a.test-0123"); err != nil || !ki.IsTerminal || ki.Size != 6 || time.Since(ki.Modified) > time.Minute {
		t.Errorf("Stat of a value: %+v, %v", ki, err)
	}
	if ki, err := s.Stat(ctx, "certificates/ca"); err != nil || ki.IsTerminal {
		t.Errorf("Stat of a directory: %+v, %v", ki, err)
	}
	if _, err := s.Stat(ctx, "certificates/c"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat of a name's prefix that is no directory: %v", err)
	}
	if !s.Exists(ctx, "certificates/ca/b.test") || !s.Exists(ctx, "ocsp/a.test-0123") || s.Exists(ctx, "certificates/ca/b") {
		t.Error("Exists is wrong")
	}
	if err := s.Delete(ctx, "certificates/ca/b.test"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, "certificates/ca/b.test/deeper/more/file") || !s.Exists(ctx, "certificates/ca/a.test/a.test.crt") {
		t.Error("Delete of a directory did not remove it alone")
	}
	if n := c.Exists(ctx, "test:k:certificates/ca/b.test/b.test.key").Val(); n != 0 {
		t.Error("a deleted value is still in Redis")
	}
	if err := s.Delete(ctx, "never/was"); err != nil {
		t.Errorf("Delete of a missing name: %v", err)
	}
}

// TestRedisLocks checks certmagic's locks in Redis between two storages
// (two instances): one holder at a time, held while refreshed, free when
// released, and free once its holder stops refreshing it (died).
func TestRedisLocks(t *testing.T) {
	srv := redistest.Start(t)
	a, ac := redisStore(t, srv.Addr, testKey(1))
	b, _ := redisStore(t, srv.Addr, testKey(1))
	// A second, not less: a lock whose holder's refreshes (every third of
	// it, each bounded by a third) stall for most of its time to live
	// lapses, as it should, and a loaded machine running the race
	// detector stalled them for 300 ms, which let b take a's lock.
	const ttl = time.Second
	a.lockTTL, b.lockTTL = ttl, ttl
	ctx := context.Background()
	if err := a.Lock(ctx, "issue_cert_a.test"); err != nil {
		t.Fatal(err)
	}
	// Held past several times to live: each refresh by a moves the lock's
	// expiry in Redis on (a lock that lapsed is gone for good: a refresh
	// extends only a lock still there), and b cannot take it after each.
	// Redis expires keys on its own clock, which synctest cannot fake:
	// the test waits for what Redis shows.
	expiry := func() time.Duration { return ac.PExpireTime(ctx, a.lockKey("issue_cert_a.test")).Val() }
	first := expiry()
	if first <= 0 {
		t.Fatalf("the lock's expiry in Redis: %v", first)
	}
	for last := first; last < first+3*ttl; {
		prev := last
		wait.For(t, "a's refresh to move the lock's expiry on", func() bool { last = expiry(); return last > prev || last < 0 })
		if last < 0 {
			t.Fatal("a's lock expired in Redis before a refresh")
		}
		if ok, err := b.TryLock(ctx, "issue_cert_a.test"); ok || err != nil {
			t.Fatalf("b took a's lock: %v, %v", ok, err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if err := b.Lock(short, "issue_cert_a.test"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("b's Lock while a holds it: %v, want the context's end", err)
	}
	cancel()
	// Released: b, waiting, gets it.
	got := make(chan error, 1)
	go func() { got <- b.Lock(ctx, "issue_cert_a.test") }()
	if err := a.Unlock(ctx, "issue_cert_a.test"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(ctx, "issue_cert_a.test"); err == nil {
		t.Error("a unlocked a lock it does not hold")
	}
	// b dies holding it (stops refreshing): a gets it within its time to
	// live, and b's late Unlock does not remove a's.
	b.mu.Lock()
	l := b.locks["issue_cert_a.test"]
	b.mu.Unlock()
	close(l.stop)
	<-l.done
	l.stop = make(chan struct{}) // for b's Unlock below, which closes it again
	l.done = make(chan struct{})
	close(l.done)
	start := time.Now()
	if err := a.Lock(ctx, "issue_cert_a.test"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > ttl+time.Second {
		t.Errorf("a waited %v for a dead holder's lock of %v", took, ttl)
	}
	b.Unlock(ctx, "issue_cert_a.test")
	if ok, _ := b.TryLock(ctx, "issue_cert_a.test"); ok {
		t.Error("b's late Unlock removed a's lock")
	}
	a.Unlock(ctx, "issue_cert_a.test")
}

func TestParseStorageKey(t *testing.T) {
	want := testKey(3)
	for _, text := range []string{
		"AwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISI=\n",
		"  AwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISI  ",
		"AwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISI",
		"030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122\n",
	} {
		if k, err := ParseStorageKey([]byte(text)); err != nil || k != want {
			t.Errorf("ParseStorageKey(%q) = %x, %v", text, k, err)
		}
	}
	for _, text := range []string{"", "c2hvcnQ=", "030405", "not a key at all, not base64 either!!"} {
		if _, err := ParseStorageKey([]byte(text)); err == nil {
			t.Errorf("ParseStorageKey(%q) took it", text)
		}
	}
}

// TestFleet runs three Managers, as three sluice instances, on one Redis
// and pebble, obtaining by DNS-01 (which the CA validates wherever the
// order was made): one order for the name, each of the three serves the
// certificate; when it is due for renewal, one renews it, and the three
// serve the renewed one. Renewal is by the ratio alone (noARI): pebble's
// renewal information may ask a 10 s certificate to be renewed at once,
// which a second instance, loading it a moment later under load, then
// did (two orders).
func TestFleet(t *testing.T) {
	srv := redistest.Start(t)
	const key, secret = "acme-update.", "c2x1aWNlIHRlc3QgdHNpZyBrZXkgc2VjcmV0IQ=="
	// Certificates of 10 s, renewed with half of that left: a renewal 5 s
	// after each order.
	ca := acmetest.Start(t, acmetest.Options{Zone: "sluice.test", TSIGName: key, TSIGSecret: secret, Validity: 10 * time.Second})
	roots := ca.Roots(t)
	var servers []*server
	var managers []*Manager
	for range 3 {
		s, use := serve(t)
		m, err := New(Options{Domains: []string{"fleet.sluice.test"}, CA: ca.Directory, Roots: ca.TLSRoots,
			Redis:              &Redis{Options: &redis.Options{Addr: srv.Addr}, Key: testKey(9)},
			DNS:                &DNS{Server: ca.DNS, KeyName: key, Secret: secret, Resolvers: []string{ca.DNS}},
			Log:                slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
			RenewalWindowRatio: 0.5, RenewCheckInterval: 200 * time.Millisecond, noARI: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Stop)
		use(m)
		servers, managers = append(servers, s), append(managers, m)
	}
	var wg sync.WaitGroup
	for _, m := range managers {
		wg.Go(func() {
			if err := m.Start(context.Background(), Challenges{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	first := servers[0].served(t, "fleet.sluice.test", roots)
	for i, s := range servers[1:] {
		if leaf := s.served(t, "fleet.sluice.test", roots); leaf.SerialNumber.Cmp(first.SerialNumber) != 0 {
			t.Errorf("instance %d serves serial %v, instance 0 %v", i+1, leaf.SerialNumber, first.SerialNumber)
		}
	}
	if n := ca.Orders(); n != 1 {
		t.Errorf("pebble issued %d certificates for three instances, want 1", n)
	}
	obtained := 0
	for _, s := range servers {
		obtained += strings.Count(s.log.String(), `msg="ACME certificate obtained"`)
	}
	if obtained != 1 {
		t.Errorf("%d instances say they obtained the certificate, want 1", obtained)
	}

	// The renewal: every instance serves a new certificate, and the CA
	// issued one more, not three.
	var renewed [3]bool
	if !wait.Until(30*time.Second, func() bool {
		all := true
		for i, s := range servers {
			if !renewed[i] {
				chain, _, err := s.handshake("fleet.sluice.test", roots)
				renewed[i] = err == nil && chain[0].SerialNumber.Cmp(first.SerialNumber) != 0
			}
			all = all && renewed[i]
		}
		return all
	}) {
		t.Fatalf("not every instance serves a renewed certificate within 30 s: %v", renewed)
	}
	if n := ca.Orders(); n != 2 {
		t.Errorf("pebble issued %d certificates after the renewal, want 2: the renewal once, by one instance", n)
	}
	renewals := 0
	for _, s := range servers {
		renewals += strings.Count(s.log.String(), `msg="ACME certificate renewed"`)
	}
	if renewals != 1 {
		t.Errorf("%d instances say they renewed the certificate, want 1", renewals)
	}
}

// FuzzParseStorageKey checks that ParseStorageKey never panics, and that
// a key it takes reads back from its base64 and its hex.
func FuzzParseStorageKey(f *testing.F) {
	for _, s := range []string{"AwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISI=", strings.Repeat("ab", 32), "", "c2hvcnQ=", " \n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		k, err := ParseStorageKey(text)
		if err != nil {
			return
		}
		for _, again := range []string{base64.StdEncoding.EncodeToString(k[:]), hex.EncodeToString(k[:])} {
			if back, err := ParseStorageKey([]byte(again)); err != nil || back != k {
				t.Fatalf("ParseStorageKey(%q) = %x, which reads back from %q as %x, %v", text, k, again, back, err)
			}
		}
	})
}
