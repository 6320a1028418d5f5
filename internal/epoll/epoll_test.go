//go:build linux

package epoll

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/wait"
)

func pipe(t *testing.T) (r, w int) {
	t.Helper()
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fds[0]); syscall.Close(fds[1]) })
	return fds[0], fds[1]
}

func TestWaitReportsEventsWithTheirIDs(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, w := pipe(t)
	const id = 1<<40 | 7 // both halves of the id survive
	if err := s.Control(syscall.EPOLL_CTL_ADD, r, syscall.EPOLLIN, id); err != nil {
		t.Fatal(err)
	}
	events := make([]syscall.EpollEvent, 4)
	if n, err := s.Wait(events, 10*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("Wait with nothing ready = %d, %v; want 0, nil (timed out)", n, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, err := s.Wait(events, -1)
		if n != 1 || err != nil || ID(events[0]) != id {
			t.Errorf("Wait = %d, %v, id %d; want 1 event with id %d", n, err, ID(events[0]), uint64(id))
		}
	}()
	syscall.Write(w, []byte{1})
	<-done
}

func TestCloseEndsWait(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() {
		_, err := s.Wait(make([]syscall.EpollEvent, 1), -1)
		errc <- err
	}()
	waitParked(t)
	s.Close()
	if err := <-errc; !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Wait after Close = %v, want os.ErrClosed", err)
	}
}

// TestWaitParksInThePoller is the reason for the package: a goroutine
// waiting on a Set must park in Go's poller ("IO wait"), not sit in a
// system call that holds its P ("syscall").
func TestWaitParksInThePoller(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go s.Wait(make([]syscall.EpollEvent, 1), time.Hour)
	waitParked(t)
}

// waitParked waits until a goroutine is in Wait, and fails the test if it
// is there in a system call rather than parked in the poller.
func waitParked(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	wait.For(t, "a goroutine parked in Wait", func() bool {
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			if !strings.Contains(g, "epoll.(*Set).Wait") {
				continue
			}
			head, _, _ := strings.Cut(g, "\n")
			switch {
			case strings.Contains(head, "[IO wait"):
				return true
			case strings.Contains(head, "[syscall"):
				t.Fatalf("a goroutine in Wait is in a system call, holding its P:\n%s", g)
			}
		}
		return false
	})
}

// TestWake: a Wake ends the Wait in progress, and one made while no Wait
// runs ends the next, so a wake-up is never lost between two Waits; Wait
// reports no events for it.
func TestWake(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	events := make([]syscall.EpollEvent, 4)
	s.Wake()
	if n, err := s.Wait(events, time.Hour); n != 0 || err != nil {
		t.Fatalf("Wait after Wake = %d, %v; want 0, nil", n, err)
	}
	done := make(chan error)
	go func() {
		n, err := s.Wait(events, time.Hour)
		if n != 0 && err == nil {
			err = errors.New("Wait woken by Wake reported events")
		}
		done <- err
	}()
	waitParked(t)
	s.Wake()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Control(syscall.EPOLL_CTL_ADD, 0, syscall.EPOLLIN, 0); err == nil {
		t.Error("Control with id 0, the Set's own, did not fail")
	}
}
