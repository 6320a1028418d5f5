package workers

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Work given one piece after another runs on one goroutine, the one that
// waited last.
func TestReusesTheLastIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
			synctest.Wait() // the worker is back on the idle list
			if n := p.Idle(); n != 1 {
				t.Fatalf("%d idle after piece %d, want 1", n, i)
			}
		}
		if len(seen) != 1 {
			t.Fatalf("20 pieces one after another ran on %d goroutines, want 1", len(seen))
		}
	})
}

// At most maxIdle wait; those beyond end at once.
func TestMaxIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
		synctest.Wait() // every worker is idle or gone
		if n := p.Idle(); n != 3 {
			t.Fatalf("%d idle, want 3", n)
		}
		// The three idle workers and the reaper; the five beyond ended.
		if n := poolGoroutines(); n != 4 {
			t.Fatalf("%d goroutines left, want 3 idle workers and the reaper", n)
		}
	})
}

// Idle workers end after idleFor (up to a quarter as long again), and the
// reaper with them.
func TestIdleEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idleFor = 40 * time.Millisecond
		done := make(chan struct{})
		p := New(func(int) { done <- struct{}{} }, 8, idleFor)
		for i := range 3 {
			p.Go(i)
		}
		for range 3 {
			<-done
		}
		synctest.Wait()
		if n := p.Idle(); n != 3 {
			t.Fatalf("%d idle, want 3", n)
		}
		time.Sleep(idleFor - time.Nanosecond)
		synctest.Wait()
		if n := p.Idle(); n != 3 {
			t.Fatalf("%d idle after less than idleFor, want 3", n)
		}
		time.Sleep(idleFor/4 + time.Nanosecond)
		synctest.Wait()
		if n := p.Idle(); n != 0 {
			t.Fatalf("%d idle after idleFor and a quarter, want 0", n)
		}
		if n := poolGoroutines(); n != 0 {
			t.Fatalf("%d goroutines left once every worker ended, want none (the reaper ends too)", n)
		}
	})
}

// Close ends the idle workers and the reaper at once; work given after
// Close still runs.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan int)
		p := New(func(v int) { done <- v }, 8, time.Minute)
		p.Go(1)
		<-done
		synctest.Wait()
		if n := p.Idle(); n != 1 {
			t.Fatalf("%d idle, want 1", n)
		}
		p.Close()
		p.Close() // twice is fine
		if n := p.Idle(); n != 0 {
			t.Fatalf("%d idle after Close", n)
		}
		p.Go(2)
		if v := <-done; v != 2 {
			t.Fatalf("ran %d", v)
		}
		synctest.Wait() // no time passes: only Close can have ended them
		if n := p.Idle(); n != 0 {
			t.Fatalf("%d idle after Close and Go", n)
		}
		if n := poolGoroutines(); n != 0 {
			t.Fatalf("%d goroutines left after Close, want none: the workers and the reaper end", n)
		}
	})
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

// A worker that goes idle late in the reaper's round, just before the
// next begins, still waits idleFor before it ends.
func TestIdleEndLateInRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idleFor = 40 * time.Millisecond
		release := make(chan struct{})
		done := make(chan struct{})
		p := New(func(late bool) {
			if late {
				<-release
			}
			done <- struct{}{}
		}, 8, idleFor)
		p.Go(true)
		p.Go(false) // idle first: the reaper's rounds start now
		<-done
		time.Sleep(idleFor/4 - time.Nanosecond)
		close(release)
		<-done
		synctest.Wait()
		time.Sleep(idleFor - time.Nanosecond)
		synctest.Wait()
		if n := p.Idle(); n != 2 {
			t.Fatalf("%d idle, want 2: the late one has not waited idleFor", n)
		}
		time.Sleep(idleFor/4 + time.Nanosecond)
		synctest.Wait()
		if n := p.Idle(); n != 0 {
			t.Fatalf("%d idle after idleFor and a quarter, want 0", n)
		}
	})
}

// poolGoroutines counts the goroutines in a Pool's code, its workers and
// its reaper, from a dump of all: runtime.NumGoroutine counts the
// process's, which the runtime's and the testing package's own may join
// at any moment (a test on a loaded machine saw one more after Close).
func poolGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/workers.(*Pool[") {
			n++
		}
	}
	return n
}
