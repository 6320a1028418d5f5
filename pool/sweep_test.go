package pool

import (
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// TestSweep: the pool's goroutine closes, once a second and without a Get,
// the idle connections past their idle timeout or their maximum age; Close
// stops it (a goroutine left in the bubble fails synctest.Test). The
// pool has no epoll watcher here: its wait is a system call that the
// bubble's clock cannot end.
func TestSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(0, nil, watcher{})
		idle, idleEnd := net.Pipe()
		aged, agedEnd := net.Pipe()
		defer idleEnd.Close()
		defer agedEnd.Close()
		p.Put(NewConn(idle, "a", &Limits{MaxIdle: 4, IdleTimeout: 2500 * time.Millisecond}, time.Now()))
		time.Sleep(time.Second / 2)
		p.Put(NewConn(aged, "b", &Limits{MaxIdle: 4, IdleTimeout: time.Hour, MaxAge: 3 * time.Second}, time.Now().Add(-time.Second)))

		// Sweeps at 1 s and 2 s: idle 2 s is within 2.5 s, age 2.5 s
		// within 3 s.
		time.Sleep(2*time.Second - time.Second/2 + time.Millisecond)
		synctest.Wait()
		if s := p.Stats(); s.Idle != 2 || s.Expired != 0 {
			t.Fatalf("after 2 s: %+v; want both idle", s)
		}
		// The sweep at 3 s: idle 3 s, age 3.5 s; both go.
		time.Sleep(time.Second)
		synctest.Wait()
		if s := p.Stats(); s.Idle != 0 || s.Expired != 2 {
			t.Fatalf("after 3 s: %+v; want both expired", s)
		}
		for _, end := range []net.Conn{idleEnd, agedEnd} {
			if _, err := end.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("the peer of a swept connection read %v, want EOF", err)
			}
		}
		p.Close()
	})
}
