package idempotency

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/redistest"
)

// benchBeginKeep measures what the layer costs a keyed POST that is
// forwarded: Begin (key, scope, fingerprint, the store's claim), the
// claim's renewal bookkeeping, and Keep (the answer encoded and stored),
// each request with a new key. The body's digest is the engine's, as it
// reads the body, and not counted.
func benchBeginKeep(b *testing.B, l *Layer) {
	a := sample()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := post("", `{"order":1}`)
		var buf []byte
		for pb.Next() {
			buf = strconv.AppendInt(append(buf[:0], "order-"...), next.Add(1), 10)
			r.Header.Reset()
			r.Header.Add("Host", "api.example.com")
			r.Header.AddBytes([]byte("Idempotency-Key"), buf)
			d := l.Begin(context.Background(), r)
			if d.Claim == nil {
				b.Fatalf("Begin: %v %v", d.Outcome, d.Err)
			}
			if err := d.Claim.Keep(a); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBeginKeep runs benchBeginKeep with records that live a second
// (the lease's, which the ttl may not be shorter than), so that the
// store holds a steady number of them, as a day's ttl under a steady
// load does.
func BenchmarkBeginKeep(b *testing.B) {
	o := Options{Lease: time.Second, TTL: time.Second}
	b.Run("local", func(b *testing.B) {
		o := o
		o.Store = NewLocal(1<<22, 1<<32)
		benchBeginKeep(b, newLayer(b, o))
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		l, _ := redisLayer(b, srv.Addr, o)
		benchBeginKeep(b, l)
	})
}

// BenchmarkReplay measures the answer to a retry of a kept request.
func BenchmarkReplay(b *testing.B) {
	run := func(b *testing.B, l *Layer) {
		r := post("k", `{"order":1}`)
		if d := l.Begin(context.Background(), r); d.Claim == nil || d.Claim.Keep(sample()) != nil {
			b.Fatal(d.Outcome, d.Err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if d := l.Begin(context.Background(), r); d.Outcome != Replayed {
				b.Fatal(d.Outcome)
			}
		}
	}
	b.Run("local", func(b *testing.B) { run(b, newLayer(b, Options{})) })
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		l, _ := redisLayer(b, srv.Addr, Options{})
		run(b, l)
	})
}

// BenchmarkRenew measures one renewal round of 1000 live claims: the
// renewer's work every third of the lease.
func BenchmarkRenew(b *testing.B) {
	run := func(b *testing.B, s Store) {
		terms := Terms{Lease: time.Minute, TTL: time.Hour}
		held := make([]Held, 1000)
		for i := range held {
			held[i] = Held{Key: Key{byte(i), byte(i >> 8), 1}, Token: newToken()}
			if f, err := s.Begin(context.Background(), held[i].Key, Fingerprint{}, held[i].Token, terms); err != nil || !f.Claimed {
				b.Fatal(f, err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := s.Renew(context.Background(), held, terms); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("local", func(b *testing.B) { run(b, NewLocal(0, 0)) })
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		run(b, &Redis{Client: client(b, srv.Addr, time.Second), Timeout: time.Second})
	})
}

// BenchmarkLocalClaim measures a Local store's part of a keyed request
// forwarded and kept: Begin claiming a new key, End keeping a 150-byte
// answer, in a store that holds 150,000 records already (a busy day's
// keys, larger than the CPU's caches), one goroutine.
func BenchmarkLocalClaim(b *testing.B) {
	s := NewLocal(1<<22, 1<<32)
	terms := Terms{Lease: 30 * time.Second, TTL: 24 * time.Hour}
	answer := make([]byte, 150)
	var key Key
	next := uint64(0)
	claim := func() {
		next++
		binary.LittleEndian.PutUint64(key[:], next*0x9e3779b97f4a7c15)
		binary.LittleEndian.PutUint64(key[8:], next)
		tok := Token{byte(next)}
		if f, err := s.Begin(context.Background(), key, Fingerprint{}, tok, terms); err != nil || !f.Claimed {
			b.Fatal(f, err)
		}
		if st, err := s.End(context.Background(), key, Fingerprint{}, tok, StateKept, answer, terms); err != nil || st != StateKept {
			b.Fatal(st, err)
		}
	}
	for range 150_000 {
		claim()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		claim()
	}
}
