package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fleet carries purges between the sluice instances that share a Redis
// server: each purge is published (Redis pub/sub) for the others to apply
// at once, and appended to a capped stream, from which an instance that
// lost its connection to Redis catches up on what it missed once it is
// back (the last FleetBacklog purges). An instance ignores its own.
type Fleet struct {
	client  *redis.Client
	channel string
	stream  string
	id      string
	apply   func(Purge) int
	log     *slog.Logger

	mu     sync.Mutex
	last   string // the stream id of the last purge applied
	ps     *redis.PubSub
	cancel context.CancelFunc
	done   chan struct{}
}

// FleetChannel is the pub/sub channel and stream name prefix.
const FleetChannel = "sluice:cache:purge"

// FleetBacklog is how many purges the stream keeps for instances that
// catch up.
const FleetBacklog = 10000

// fleetMessage is what a purge is published as.
type fleetMessage struct {
	From  string `json:"from"`
	ID    string `json:"id,omitempty"` // the stream's id for it
	Purge Purge  `json:"purge"`
}

// NewFleet returns the fleet of the instances using client's server,
// whose purges this one hands to apply (which removes what a Purge
// selects from the instance's stores and returns how many). log
// receives failures; nil means slog.Default().
func NewFleet(client *redis.Client, apply func(Purge) int, log *slog.Logger) *Fleet {
	var b [8]byte
	rand.Read(b[:])
	if log == nil {
		log = slog.Default()
	}
	return &Fleet{client: client, channel: FleetChannel, stream: FleetChannel + ":log",
		id: hex.EncodeToString(b[:]), apply: apply, log: log}
}

// Start subscribes, until Close, and applies what other instances
// publish.
func (f *Fleet) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	f.cancel, f.done = cancel, make(chan struct{})
	f.ps = f.client.Subscribe(ctx, f.channel)
	go f.run(ctx)
}

// Close stops the subscription and waits for it.
func (f *Fleet) Close() {
	if f.cancel == nil {
		return
	}
	f.cancel()
	f.ps.Close() // ends a wait for the next message
	<-f.done
}

func (f *Fleet) run(ctx context.Context) {
	defer close(f.done)
	f.mu.Lock()
	if msgs, err := f.client.XRevRangeN(ctx, f.stream, "+", "-", 1).Result(); err == nil && len(msgs) > 0 {
		f.last = msgs[0].ID
	} else {
		f.last = "0-0"
	}
	f.mu.Unlock()
	ps := f.ps
	subscribed := false
	failing := false
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, time.Minute)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var nerr interface{ Timeout() bool }
			if errors.As(err, &nerr) && nerr.Timeout() {
				continue
			}
			if !failing {
				f.log.Warn("cache purges from the fleet: Redis unreachable; catching up once back", "error", err)
			}
			failing = true
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				if subscribed {
					f.catchUp(ctx) // a reconnection: what was published meanwhile
				}
				subscribed, failing = true, false
			}
		case *redis.Message:
			f.receive(m.Payload)
		}
	}
}

// receive applies a published purge, unless it is this instance's.
func (f *Fleet) receive(payload string) {
	var m fleetMessage
	if err := json.Unmarshal([]byte(payload), &m); err != nil {
		f.log.Warn("cache purges from the fleet: a message not understood", "error", err)
		return
	}
	f.mu.Lock()
	if m.ID != "" && streamAfter(m.ID, f.last) {
		f.last = m.ID
	}
	f.mu.Unlock()
	if m.From != f.id {
		f.apply(m.Purge)
	}
}

// catchUp applies what the stream holds after the last purge applied.
func (f *Fleet) catchUp(ctx context.Context) {
	f.mu.Lock()
	from := "(" + f.last
	f.mu.Unlock()
	msgs, err := f.client.XRange(ctx, f.stream, from, "+").Result()
	if err != nil {
		f.log.Warn("cache purges from the fleet: catching up failed", "error", err)
		return
	}
	for _, x := range msgs {
		if p, ok := x.Values["m"].(string); ok {
			f.receive(p)
		}
		f.mu.Lock()
		f.last = x.ID
		f.mu.Unlock()
	}
}

// Publish has the other instances apply p.
func (f *Fleet) Publish(ctx context.Context, p Purge) error {
	m := fleetMessage{From: f.id, Purge: p}
	body, _ := json.Marshal(m)
	id, err := f.client.XAdd(ctx, &redis.XAddArgs{Stream: f.stream, MaxLen: FleetBacklog, Approx: true,
		Values: map[string]any{"m": string(body)}}).Result()
	if err != nil {
		return err
	}
	m.ID = id
	body, _ = json.Marshal(m)
	return f.client.Publish(ctx, f.channel, body).Err()
}

// streamAfter reports whether stream id a comes after b ("ms-seq").
func streamAfter(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	if len(am) != len(bm) {
		return len(am) > len(bm)
	}
	if am != bm {
		return am > bm
	}
	if len(as) != len(bs) {
		return len(as) > len(bs)
	}
	return as > bs
}
