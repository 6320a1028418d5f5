package workers

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Work given one piece after another runs on one goroutine, the one that
// waited last.
func TestReusesTheLastIdle(t *testing.T) {
	var mu sync.Mutex
	seen := map[uint64]int{}
	ran := make(chan struct{})
	p := New(func(int) {
		mu.Lock()
		seen[goid()]++
		mu.Unlock()
		ran <- struct{}{}
	}, 4, time.Minute)
	defer p.Close()
	for i := range 20 {
		p.Go(i)
		<-ran
		waitFor(t, "the worker to wait again", func() bool { return p.Idle() == 1 })
	}
	if len(seen) != 1 {
		t.Fatalf("20 pieces one after another ran on %d goroutines, want 1", len(seen))
	}
}

// At most maxIdle wait; those beyond end at once.
func TestMaxIdle(t *testing.T) {
	release := make(chan struct{})
	var started sync.WaitGroup
	p := New(func(int) { started.Done(); <-release }, 3, time.Minute)
	defer p.Close()
	started.Add(8)
	for i := range 8 {
		p.Go(i)
	}
	started.Wait()
	close(release)
	waitFor(t, "the workers to finish", func() bool { return p.Idle() == 3 })
	time.Sleep(20 * time.Millisecond)
	if n := p.Idle(); n != 3 {
		t.Fatalf("%d idle, want 3", n)
	}
}

// Idle workers end after idleFor, and the reaper with them.
func TestIdleEnd(t *testing.T) {
	base := runtime.NumGoroutine()
	done := make(chan struct{})
	p := New(func(int) { done <- struct{}{} }, 8, 40*time.Millisecond)
	for i := range 3 {
		p.Go(i)
	}
	for range 3 {
		<-done
	}
	waitFor(t, "three idle workers", func() bool { return p.Idle() == 3 })
	waitFor(t, "the idle workers to end", func() bool { return p.Idle() == 0 })
	waitFor(t, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= base })
}

// Close ends the idle workers; work given after Close still runs.
func TestClose(t *testing.T) {
	base := runtime.NumGoroutine()
	done := make(chan int)
	p := New(func(v int) { done <- v }, 8, time.Minute)
	p.Go(1)
	<-done
	waitFor(t, "an idle worker", func() bool { return p.Idle() == 1 })
	p.Close()
	if n := p.Idle(); n != 0 {
		t.Fatalf("%d idle after Close", n)
	}
	p.Go(2)
	if v := <-done; v != 2 {
		t.Fatalf("ran %d", v)
	}
	if n := p.Idle(); n != 0 {
		t.Fatalf("%d idle after Close and Go", n)
	}
	// The reaper started by the first wait sleeps out its minute; only
	// the workers are counted.
	waitFor(t, "the workers to end", func() bool { return runtime.NumGoroutine() <= base+1 })
}

// goid returns the calling goroutine's id, from its stack trace.
func goid() uint64 {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	var id uint64
	for _, c := range b[len("goroutine "):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
