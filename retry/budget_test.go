package retry

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestBudgetWindowSlides runs a Budget on its own clock (internal/clock,
// which in a synctest bubble reads the bubble's time, starting on a whole
// second): a second's requests and retries count for the ten seconds that
// begin with it, to the nanosecond, then no more; the reserve
// (MinPerSecond × 10) stays.
func TestBudgetWindowSlides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBudget(0.5, 0.1, nil) // 5 retries for the 10 requests, 1 in reserve
		for range 10 {
			b.Request()
		}
		withdraw := func(when string, n, want int) {
			t.Helper()
			allowed := 0
			for range n {
				if b.Withdraw() {
					allowed++
				}
			}
			if allowed != want {
				t.Fatalf("%s: %d of %d retries allowed, want %d", when, allowed, n, want)
			}
		}
		withdraw("at first", 2, 2)
		time.Sleep(10*time.Second - time.Nanosecond)
		withdraw("a nanosecond before the requests leave the window", 1, 1)
		time.Sleep(time.Nanosecond)
		withdraw("once the requests left the window (the retry before has used the reserve)", 1, 0)
		time.Sleep(9 * time.Second)
		withdraw("once every retry left the window", 2, 1)
		if b.Denied() != 2 {
			t.Fatalf("%d denied, want 2", b.Denied())
		}
	})
}
