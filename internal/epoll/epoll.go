//go:build linux

package epoll

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// Set is an epoll instance. Its Wait is for one goroutine at a time;
// Control and Wake may be called from any goroutine.
type Set struct {
	fd int
	f  *os.File // fd, registered with Go's poller
	rc syscall.RawConn

	// A pipe registered with id 0: a byte written to it by Wake ends a
	// Wait, or the next one if none is in progress.
	wakeR, wakeW int

	closed atomic.Bool
}

// New creates a Set.
func New() (*Set, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	// Nonblocking, so os registers it with the poller.
	s := &Set{fd: fd, f: os.NewFile(uintptr(fd), "epoll")}
	if s.rc, err = s.f.SyscallConn(); err == nil {
		// A file the poller did not take has no deadlines: its Wait
		// would fail, so fail here instead.
		err = s.f.SetReadDeadline(time.Time{})
	}
	if err == nil {
		var fds [2]int
		if err = syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err == nil {
			s.wakeR, s.wakeW = fds[0], fds[1]
			if err = s.control(syscall.EPOLL_CTL_ADD, s.wakeR, syscall.EPOLLIN, 0); err != nil {
				syscall.Close(s.wakeR)
				syscall.Close(s.wakeW)
			}
		}
	}
	if err != nil {
		s.f.Close()
		return nil, err
	}
	return s, nil
}

// errReservedID is Control's answer to id 0, which is the Set's own.
var errReservedID = errors.New("epoll: id 0 is reserved")

// Control adds (syscall.EPOLL_CTL_ADD), changes or removes fd's
// registration, which reports events with id, which must not be 0.
func (s *Set) Control(op, fd int, events uint32, id uint64) error {
	if id == 0 {
		return errReservedID
	}
	return s.control(op, fd, events, id)
}

func (s *Set) control(op, fd int, events uint32, id uint64) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	return os.NewSyscallError("epoll_ctl", syscall.EpollCtl(s.fd, op, fd, &ev))
}

// ID is the id an event was registered with.
func ID(ev syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// Wait fills events with the events ready, waiting up to timeout for one
// (forever if timeout < 0). It returns 0 and no error when the timeout
// passes first or Wake was called, and os.ErrClosed once the Set is
// closed. When it fills events, more may be ready: the next Wait returns
// them at once.
func (s *Set) Wait(events []syscall.EpollEvent, timeout time.Duration) (int, error) {
	var deadline time.Time
	if timeout >= 0 {
		deadline = time.Now().Add(timeout)
	}
	if err := s.f.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	var n int
	var werr error
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			n, werr = syscall.EpollWait(int(fd), events, 0)
			if werr != syscall.EINTR {
				break
			}
		}
		return n != 0 || werr != nil
	})
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, nil
	case err != nil && s.closed.Load():
		return 0, os.ErrClosed // the poller says "use of closed file"
	case err != nil:
		return 0, err
	case werr != nil:
		return 0, os.NewSyscallError("epoll_wait", werr)
	}
	// Take out the wake-up, if it is among them.
	for i := 0; i < n; i++ {
		if ID(events[i]) == 0 {
			var buf [64]byte
			for m, _ := syscall.Read(s.wakeR, buf[:]); m == len(buf); m, _ = syscall.Read(s.wakeR, buf[:]) {
			}
			n--
			events[i] = events[n]
			break
		}
	}
	return n, nil
}

// Wake ends the Wait in progress, or the next one: it returns with no
// events.
func (s *Set) Wake() {
	syscall.Write(s.wakeW, []byte{1})
}

// Close closes the Set; a Wait in progress returns os.ErrClosed.
func (s *Set) Close() error {
	s.closed.Store(true)
	err := s.f.Close()
	syscall.Close(s.wakeR)
	syscall.Close(s.wakeW)
	return err
}
