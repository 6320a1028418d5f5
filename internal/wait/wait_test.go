package wait

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a Fatalf instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for n.Load() < 3 {
			n.Add(1)
		}
	}()
	For(t, "three", func() bool { return n.Load() == 3 })
}

func TestWithinFailsWhenTheConditionNeverHolds(t *testing.T) {
	f := &fakeT{TB: t}
	calls := 0
	Within(f, 30*time.Millisecond, "nothing", func() bool { calls++; return false })
	if f.failed != "timed out after 30ms waiting for nothing" {
		t.Fatalf("failure %q", f.failed)
	}
	if calls < 2 {
		t.Fatalf("the condition was polled %d times", calls)
	}
}

func TestUntil(t *testing.T) {
	if !Until(time.Second, func() bool { return true }) {
		t.Fatal("Until reported false for a condition that holds")
	}
	if Until(5*time.Millisecond, func() bool { return false }) {
		t.Fatal("Until reported true for a condition that never holds")
	}
}

func TestBlocked(t *testing.T) {
	ch := make(chan int)
	done := make(chan struct{})
	go func() {
		defer close(done)
		receiveOn(ch)
	}()
	For(t, "the goroutine to block in receiveOn", func() bool { return Blocked("wait.receiveOn(", "chan receive") })
	if Blocked("wait.receiveOn(", "select") {
		t.Error("Blocked matched a state the goroutine is not in")
	}
	ch <- 1
	<-done
	if Blocked("wait.receiveOn(", "chan receive") {
		t.Error("Blocked matched a goroutine that ended")
	}
}

//go:noinline
func receiveOn(ch chan int) int { return <-ch }
