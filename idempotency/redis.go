package idempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTimeout bounds each of a Redis store's round trips when its
// Timeout is 0.
const DefaultTimeout = 50 * time.Millisecond

// DefaultPrefix starts the keys of a Redis store whose Prefix is "".
const DefaultPrefix = "sluice:idempotency:"

// RedisClient is what a Redis store needs of a go-redis client: scripts,
// and pipelines for renewing many claims in one round trip. A
// *redis.Client is one.
type RedisClient interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// Redis is a Store in a Redis server, shared by every sluice that uses the
// same server and Prefix: a fleet of instances gives the same answers, and
// a key claimed by one is a 409 at the others.
//
// Each key has two Redis keys with lifetimes of their own, in one hash
// slot (the key's hex digest in braces, for Redis Cluster):
//
//   - PREFIX{KEY}:c, the claim: the holder's token, set NX with the lease
//     as its expiry, renewed while the request runs;
//   - PREFIX{KEY}:r, the record: a hash of its state, the claim's token,
//     the payload's fingerprint and, once kept, the answer; it expires
//     after ttl.
//
// Each operation is one Lua script (EVALSHA; EVAL the first time a
// server lacks it), so that reading and writing a key is atomic and one
// round trip: Begin reads the record and the claim and claims the key
// when nothing stands in the way (a SET NX the script makes safe against
// a record being kept between the read and the claim); End writes the
// record with the ttl and deletes the claim, only while the caller's
// token holds it; Renew extends the claims of a batch only where the
// token still holds them, all in one pipelined round trip. A claim whose
// claim key expired while its record still says in flight is abandoned:
// its holder died or stopped renewing.
//
// Each round trip gives up after Timeout, with an error.
type Redis struct {
	// Client is the connection to the server, which the caller closes
	// (ratelimit.NewRedisClient makes one whose own timeouts suit).
	Client RedisClient
	// Prefix starts every key this store writes; "" means DefaultPrefix.
	Prefix string
	// Timeout bounds each round trip; 0 means DefaultTimeout.
	Timeout time.Duration
}

// States as the scripts write them in a record's "s" field.
const (
	redisInFlight = "f"
	redisKept     = "k"
	redisUnknown  = "u"
	redisNotKept  = "n"
	redisAbandon  = "a" // never written: a record "f" without its claim
)

// beginScript is Begin. KEYS[1] is the claim, KEYS[2] the record;
// ARGV[1] the token, ARGV[2] the fingerprint, ARGV[3] the lease and
// ARGV[4] the record's life (ms), ARGV[5] "1" to retake an unknown or
// abandoned key. It returns {"claimed", prior state} or {state, answer
// when kept} or {"mismatch", state}.
var beginScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[2], 's', 'f')
local holder = redis.call('GET', KEYS[1])
local prior = ''
if r[1] then
  local s = r[1]
  if s == 'f' and not holder then s = 'a' end
  if r[2] ~= ARGV[2] then return {'mismatch', s} end
  if s == 'k' then return {s, redis.call('HGET', KEYS[2], 'a') or ''} end
  if (s == 'u' or s == 'a') and ARGV[5] == '1' then
    prior = s
  else
    return {s}
  end
elseif holder then
  return {'f'}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 's', 'f', 't', ARGV[1], 'f', ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return {'claimed', prior}
`)

// renewScript is one claim's Renew. KEYS as beginScript's; ARGV[1] the
// token, ARGV[2] the lease (ms). It returns 1 if the token holds the
// claim (again), 0 if not.
var renewScript = redis.NewScript(`
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif holder then
  return 0
else
  local r = redis.call('HMGET', KEYS[2], 's', 't')
  if r[1] ~= 'f' or r[2] ~= ARGV[1] then return 0 end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
`)

// endScript is End. KEYS as beginScript's; ARGV[1] the token, ARGV[2] the
// fingerprint, ARGV[3] the state to write ("" removes the record),
// ARGV[4] the answer, ARGV[5] the ttl (ms). It returns 1, or 0 when the
// token no longer holds the key (nothing written).
var endScript = redis.NewScript(`
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  if holder then return 0 end
  local t = redis.call('HGET', KEYS[2], 't')
  if t and t ~= ARGV[1] then return 0 end
else
  redis.call('DEL', KEYS[1])
end
redis.call('DEL', KEYS[2])
if ARGV[3] == '' then return 1 end
if ARGV[3] == 'k' then
  redis.call('HSET', KEYS[2], 's', 'k', 't', ARGV[1], 'f', ARGV[2], 'a', ARGV[4])
else
  redis.call('HSET', KEYS[2], 's', ARGV[3], 't', ARGV[1], 'f', ARGV[2])
end
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
`)

func (r *Redis) keys(k Key) []string {
	p := r.Prefix
	if p == "" {
		p = DefaultPrefix
	}
	base := p + "{" + k.String() + "}:"
	return []string{base + "c", base + "r"}
}

func (r *Redis) context(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return context.WithTimeout(ctx, timeout)
}

// ms writes d in whole milliseconds, at least 1, for PX and PEXPIRE.
func ms(d time.Duration) int64 { return max(1, d.Milliseconds()) }

// Begin implements Store.
func (r *Redis) Begin(ctx context.Context, key Key, fp Fingerprint, token Token, t Terms) (Found, error) {
	ctx, cancel := r.context(ctx)
	defer cancel()
	retake := "0"
	if t.Retake {
		retake = "1"
	}
	res, err := beginScript.Run(ctx, r.Client, r.keys(key), token[:], fp[:], ms(t.Lease), ms(max(t.TTL, t.Lease)), retake).Slice()
	if err != nil {
		return Found{}, fmt.Errorf("redis: %w", err)
	}
	word := func(i int) (string, bool) {
		if i >= len(res) {
			return "", false
		}
		s, ok := res[i].(string)
		return s, ok
	}
	first, _ := word(0)
	switch first {
	case "claimed":
		prior, _ := word(1)
		p, ok := redisState(prior)
		if prior == "" {
			p, ok = StateNone, true
		}
		if ok {
			return Found{Claimed: true, Prior: p}, nil
		}
	case "mismatch":
		s, _ := word(1)
		if st, ok := redisState(s); ok {
			return Found{State: st, Mismatch: true}, nil
		}
	case redisKept:
		if a, ok := word(1); ok {
			return Found{State: StateKept, Answer: []byte(a)}, nil
		}
	default:
		if st, ok := redisState(first); ok {
			return Found{State: st}, nil
		}
	}
	return Found{}, fmt.Errorf("redis: the begin script returned %q", res)
}

func redisState(s string) (State, bool) {
	switch s {
	case redisInFlight:
		return StateInFlight, true
	case redisAbandon:
		return StateAbandoned, true
	case redisKept:
		return StateKept, true
	case redisUnknown:
		return StateUnknown, true
	case redisNotKept:
		return StateNotKept, true
	}
	return StateNone, false
}

// Renew implements Store: one pipeline of renewScript runs, one round
// trip (two the first time a server lacks the script).
func (r *Redis) Renew(ctx context.Context, held []Held, t Terms) ([]bool, error) {
	if len(held) == 0 {
		return nil, nil
	}
	ctx, cancel := r.context(ctx)
	defer cancel()
	lease := ms(t.Lease)
	run := func() ([]*redis.Cmd, error) {
		pipe := r.Client.Pipeline()
		cmds := make([]*redis.Cmd, len(held))
		for i, h := range held {
			cmds[i] = renewScript.EvalSha(ctx, pipe, r.keys(h.Key), h.Token[:], lease)
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := renewScript.Load(ctx, r.Client).Err(); err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		cmds, err = run()
	}
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	ok := make([]bool, len(held))
	for i, c := range cmds {
		n, err := c.Int()
		if err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		ok[i] = n == 1
	}
	return ok, nil
}

// End implements Store.
func (r *Redis) End(ctx context.Context, key Key, fp Fingerprint, token Token, s State, answer []byte, t Terms) (State, error) {
	ctx, cancel := r.context(ctx)
	defer cancel()
	var word string
	switch s {
	case StateNone:
	case StateKept:
		word = redisKept
	case StateUnknown:
		word = redisUnknown
	case StateNotKept:
		word = redisNotKept
	default:
		return StateNone, fmt.Errorf("idempotency: End with state %v", s)
	}
	if s != StateKept {
		answer = nil
	}
	n, err := endScript.Run(ctx, r.Client, r.keys(key), token[:], fp[:], word, answer, ms(t.TTL)).Int()
	switch {
	case err != nil:
		return StateNone, fmt.Errorf("redis: %w", err)
	case n != 1:
		return StateNone, ErrLost
	}
	return s, nil
}
