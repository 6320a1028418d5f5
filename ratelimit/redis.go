package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTimeout bounds a Redis store's wait for its answer when its
// Timeout is 0.
const DefaultTimeout = 50 * time.Millisecond

// Redis is a Store in a Redis server, shared by every sluice that uses
// the same server, Prefix and key: a fleet of instances spends from one
// budget per key.
//
// Each request is one round trip: a Lua script (EVALSHA, and EVAL the
// first time a server has not seen it) that reads the key's theoretical
// arrival time, decides, and writes it back, atomically. Its time is the
// Redis server's (TIME, in the script), so instances whose clocks differ
// still share one budget. A key expires once its budget is whole again,
// so Redis holds only the keys of clients that spent some of theirs
// recently.
//
// Take gives up after Timeout, with an error: the Limiter then follows
// its OnStoreError.
type Redis struct {
	// Client is the connection to the server, shared by the stores of
	// every route; NewRedisClient makes one whose own timeouts suit.
	Client redis.Scripter
	// Prefix starts every key this store writes: the route's name, say,
	// so that routes keep budgets apart.
	Prefix string
	// Timeout bounds each Take; 0 means DefaultTimeout.
	Timeout time.Duration
}

// gcraScript is the GCRA of gcra, in Redis, with microseconds of the
// server's clock as time. KEYS[1] holds the theoretical arrival time;
// ARGV[1] is the interval in microseconds (fractions allowed), ARGV[2]
// the burst. It returns {allowed (0 or 1), remaining, retry after in
// microseconds, reset in microseconds}.
var gcraScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now) or now
if tat < now then tat = now end
local next = tat + interval
local allow_at = next - burst * interval
if now < allow_at then
  return {0, 0, math.ceil(allow_at - now), math.ceil(tat - now)}
end
redis.call('SET', KEYS[1], string.format('%.3f', next), 'PX', math.max(1, math.ceil((next - now) / 1000)))
return {1, math.floor((now - allow_at) / interval), 0, math.ceil(next - now)}
`)

// NewRedisClient returns a client of the Redis server at addr whose own
// timeouts (dial, read, write, waiting for a pooled connection) are
// timeout, with no retries: each Take is one try, bounded by the store's
// Timeout, so that a server that is down or slow costs a request no more
// than that.
//
// It silences go-redis's own logger, process-wide: that logs each failed
// dial, a line per request while Redis is down, where the Limiter logs a
// line per 10 seconds with the count of the failures left out.
func NewRedisClient(addr, password string, db int, timeout time.Duration) *redis.Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	quietOnce.Do(func() { redis.SetLogger(quiet{}) })
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		Password:              password,
		DB:                    db,
		DialTimeout:           timeout,
		DialerRetries:         1,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolTimeout:           timeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DisableIdentity:       true, // no CLIENT SETINFO round trip on each new connection
	})
}

var quietOnce sync.Once

// quiet is a go-redis logger that drops what it is given.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Take implements Store. now is not used: the time is the server's.
func (r *Redis) Take(key []byte, p Policy, _ time.Time) (Decision, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	interval := strconv.FormatFloat(float64(p.Rate.Interval())/float64(time.Microsecond), 'f', 3, 64)
	res, err := gcraScript.Run(ctx, r.Client, []string{r.Prefix + string(key)}, interval, p.burst()).Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("redis: %w", err)
	}
	if len(res) != 4 {
		return Decision{}, fmt.Errorf("redis: the rate limit script returned %d values, not 4", len(res))
	}
	return Decision{
		Allowed:    res[0] == 1,
		Remaining:  res[1],
		RetryAfter: time.Duration(res[2]) * time.Microsecond,
		Reset:      time.Duration(res[3]) * time.Microsecond,
	}, nil
}
