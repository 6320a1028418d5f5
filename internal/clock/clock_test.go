package clock

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestNowFollowsTheMonotonicClock: Now advances exactly as the clock
// time.Now reads (in a synctest bubble, whose clock moves only when the
// test sleeps: code reading Now runs on a fake clock there too), and
// stays within a second of time.Now.
func TestNowFollowsTheMonotonicClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := Now()
		time.Sleep(20 * time.Millisecond)
		b := Now()
		if d := b.Sub(a); d != 20*time.Millisecond {
			t.Fatalf("20ms sleep measured as %v", d)
		}
		if d := time.Since(b); d != 0 {
			t.Fatalf("time.Since(Now()) = %v with no time passing", d)
		}
	})
	b := Now()
	// Now carries a monotonic reading: Since and Until use it.
	if d := time.Since(b); d < 0 || d > 5*time.Second {
		t.Fatalf("time.Since(Now()) = %v", d)
	}
	if w := b.Sub(time.Now()); w > time.Second || w < -time.Second {
		t.Fatalf("Now is %v away from time.Now", w)
	}
}

func BenchmarkNow(b *testing.B) {
	for i := 0; i < b.N; i++ {
		Now()
	}
}

func BenchmarkTimeNow(b *testing.B) {
	for i := 0; i < b.N; i++ {
		time.Now()
	}
}
