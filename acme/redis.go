package acme

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
)

// Redis is where a fleet of sluice instances keeps its ACME account,
// certificates and keys: one Redis server, so that one instance obtains
// and renews each certificate (certmagic's locks, held in Redis) and the
// others load it. Every value is encrypted with Key (AES-256-GCM, bound to
// its name), so that the server holds no private key in the clear.
type Redis struct {
	// Options connect to the server (go-redis's: redis.ParseURL makes
	// them from a redis:// URL). The Manager makes its client from them
	// when it starts, and closes it when it stops.
	Options *redis.Options
	// Prefix starts every Redis key written; "" means
	// DefaultRedisPrefix.
	Prefix string
	// Key encrypts every value: 32 bytes the fleet's instances share
	// (ParseStorageKey reads it from a file's text).
	Key [32]byte
}

// DefaultRedisPrefix starts the Redis keys of a Redis storage whose
// Prefix is "".
const DefaultRedisPrefix = "sluice:acme:"

// ParseStorageKey reads a storage key from the text of a key file: 32
// bytes written in base64 (as openssl rand -base64 32 writes them) or in
// hex (64 digits), surrounding white space ignored.
func ParseStorageKey(text []byte) ([32]byte, error) {
	var key [32]byte
	s := strings.TrimSpace(string(text))
	for _, dec := range []func(string) ([]byte, error){
		base64.StdEncoding.DecodeString, base64.RawStdEncoding.DecodeString,
		base64.URLEncoding.DecodeString, base64.RawURLEncoding.DecodeString, hex.DecodeString,
	} {
		if b, err := dec(s); err == nil && len(b) == len(key) {
			copy(key[:], b)
			return key, nil
		}
	}
	return key, errors.New("want 32 random bytes in base64 or hex (openssl rand -base64 32 makes them)")
}

// redisLockTTL is how long a lock lives unless its holder refreshes it
// (every third of it): a holder that died holds its lock no longer.
const redisLockTTL = 10 * time.Second

// redisStorage is a certmagic.Storage in Redis. A value lives in a hash
// (its ciphertext, its size, its time) at PREFIX "k:" NAME; every name is
// in the set PREFIX "names", from which List and Stat find the
// "directories" (the prefixes of names up to a '/'). A lock is a key
// PREFIX "lock:" NAME holding its holder's token, set NX with a time to
// live, refreshed while held, removed by its holder alone.
type redisStorage struct {
	client  redis.UniversalClient
	prefix  string
	aead    cipher.AEAD
	lockTTL time.Duration

	mu    sync.Mutex
	locks map[string]*redisLock // held by this storage
}

type redisLock struct {
	token string
	stop  chan struct{}
	done  chan struct{}
}

// newRedisStorage returns a storage in the server client talks to.
func newRedisStorage(client redis.UniversalClient, prefix string, key [32]byte) (*redisStorage, error) {
	if prefix == "" {
		prefix = DefaultRedisPrefix
	}
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &redisStorage{client: client, prefix: prefix, aead: aead, lockTTL: redisLockTTL, locks: map[string]*redisLock{}}, nil
}

func (s *redisStorage) valueKey(name string) string { return s.prefix + "k:" + name }
func (s *redisStorage) namesKey() string            { return s.prefix + "names" }
func (s *redisStorage) lockKey(name string) string  { return s.prefix + "lock:" + name }

// seal encrypts value for name: a random nonce, then the ciphertext,
// whose tag binds it to name (a value moved to another name does not
// open).
func (s *redisStorage) seal(name string, value []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(value)+s.aead.Overhead())
	crand.Read(nonce) // never fails
	return s.aead.Seal(nonce, nonce, value, []byte(name))
}

func (s *redisStorage) open(name string, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, fmt.Errorf("acme: redis: %s: too short to be a value", name)
	}
	b, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(name))
	if err != nil {
		return nil, fmt.Errorf("acme: redis: %s does not open with the storage key (another fleet's key, or altered)", name)
	}
	return b, nil
}

// Store implements certmagic.Storage: the value and its name in one
// transaction.
func (s *redisStorage) Store(ctx context.Context, name string, value []byte) error {
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.valueKey(name), "v", s.seal(name, value), "s", len(value), "m", time.Now().UnixNano())
		p.SAdd(ctx, s.namesKey(), name)
		return nil
	})
	if err != nil {
		return fmt.Errorf("acme: redis: storing %s: %w", name, err)
	}
	return nil
}

// Load implements certmagic.Storage.
func (s *redisStorage) Load(ctx context.Context, name string) ([]byte, error) {
	sealed, err := s.client.HGet(ctx, s.valueKey(name), "v").Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("acme: redis: %s: %w", name, fs.ErrNotExist)
	case err != nil:
		return nil, fmt.Errorf("acme: redis: loading %s: %w", name, err)
	}
	return s.open(name, sealed)
}

// names returns every name stored.
func (s *redisStorage) names(ctx context.Context) ([]string, error) {
	names, err := s.client.SMembers(ctx, s.namesKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("acme: redis: listing: %w", err)
	}
	return names, nil
}

// under returns the names of dir's subtree: dir itself, and those under
// "dir/" (all of them for dir "").
func under(names []string, dir string) []string {
	var found []string
	for _, n := range names {
		if dir == "" || n == dir || strings.HasPrefix(n, dir+"/") {
			found = append(found, n)
		}
	}
	return found
}

// Delete implements certmagic.Storage: name, and every name under it.
func (s *redisStorage) Delete(ctx context.Context, name string) error {
	names, err := s.names(ctx)
	if err != nil {
		return err
	}
	gone := under(names, strings.TrimSuffix(name, "/"))
	if len(gone) == 0 {
		return nil
	}
	_, err = s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, n := range gone {
			p.Del(ctx, s.valueKey(n))
		}
		members := make([]any, len(gone))
		for i, n := range gone {
			members[i] = n
		}
		p.SRem(ctx, s.namesKey(), members...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("acme: redis: deleting %s: %w", name, err)
	}
	return nil
}

// Exists implements certmagic.Storage: a name, or a directory of names.
func (s *redisStorage) Exists(ctx context.Context, name string) bool {
	names, err := s.names(ctx)
	return err == nil && len(under(names, strings.TrimSuffix(name, "/"))) > 0
}

// List implements certmagic.Storage: the names and directories right
// under dir, or with recursive every name and directory below it.
func (s *redisStorage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	names, err := s.names(ctx)
	if err != nil {
		return nil, err
	}
	dir = strings.TrimSuffix(dir, "/")
	seen := map[string]bool{}
	for _, n := range under(names, dir) {
		if n == dir {
			continue
		}
		rest := n
		base := ""
		if dir != "" {
			rest, base = n[len(dir)+1:], dir+"/"
		}
		parts := strings.Split(rest, "/")
		if !recursive {
			parts = parts[:1]
		}
		for i := range parts {
			seen[base+strings.Join(parts[:i+1], "/")] = true
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("acme: redis: %s: %w", dir, fs.ErrNotExist)
	}
	list := make([]string, 0, len(seen))
	for n := range seen {
		list = append(list, n)
	}
	slices.Sort(list)
	return list, nil
}

// Stat implements certmagic.Storage.
func (s *redisStorage) Stat(ctx context.Context, name string) (certmagic.KeyInfo, error) {
	vals, err := s.client.HMGet(ctx, s.valueKey(name), "s", "m").Result()
	if err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("acme: redis: %s: %w", name, err)
	}
	if size, ok := vals[0].(string); ok {
		n, _ := strconv.ParseInt(size, 10, 64)
		m, _ := strconv.ParseInt(fmt.Sprint(vals[1]), 10, 64)
		return certmagic.KeyInfo{Key: name, Size: n, Modified: time.Unix(0, m), IsTerminal: true}, nil
	}
	if s.Exists(ctx, name) {
		return certmagic.KeyInfo{Key: name, IsTerminal: false}, nil
	}
	return certmagic.KeyInfo{}, fmt.Errorf("acme: redis: %s: %w", name, fs.ErrNotExist)
}

// refreshScript extends a lock held by the token ARGV[1] by ARGV[2] ms;
// unlockScript removes it. Each returns 1, or 0 when the token does not
// hold it.
var (
	refreshScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)
	unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)
)

// TryLock implements certmagic.TryLocker: the lock, if no one holds it.
func (s *redisStorage) TryLock(ctx context.Context, name string) (bool, error) {
	token := crand.Text()
	ok, err := s.client.SetNX(ctx, s.lockKey(name), token, s.lockTTL).Result()
	if err != nil {
		return false, fmt.Errorf("acme: redis: locking %s: %w", name, err)
	}
	if !ok {
		return false, nil
	}
	l := &redisLock{token: token, stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	s.locks[name] = l
	s.mu.Unlock()
	go s.refresh(name, l)
	return true, nil
}

// Lock implements certmagic.Locker: it waits for the lock, trying again
// every quarter of a second or so, until ctx ends.
func (s *redisStorage) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(200*time.Millisecond + rand.N(100*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// refresh keeps l alive until Unlock: every third of its time to live.
func (s *redisStorage) refresh(name string, l *redisLock) {
	defer close(l.done)
	t := time.NewTicker(s.lockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.lockTTL/3)
			refreshScript.Run(ctx, s.client, []string{s.lockKey(name)}, l.token, s.lockTTL.Milliseconds())
			cancel()
		}
	}
}

// Unlock implements certmagic.Locker: it stops refreshing the lock and
// removes it, if this storage's token still holds it.
func (s *redisStorage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	l := s.locks[name]
	delete(s.locks, name)
	s.mu.Unlock()
	if l == nil {
		return fmt.Errorf("acme: redis: unlocking %s, which is not locked here", name)
	}
	close(l.stop)
	<-l.done
	if err := unlockScript.Run(ctx, s.client, []string{s.lockKey(name)}, l.token).Err(); err != nil {
		return fmt.Errorf("acme: redis: unlocking %s: %w", name, err)
	}
	return nil
}

var (
	_ certmagic.Storage   = (*redisStorage)(nil)
	_ certmagic.TryLocker = (*redisStorage)(nil)
)
