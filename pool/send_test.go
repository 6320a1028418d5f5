//go:build linux

package pool

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// readable reports whether c's socket holds bytes (or its end) right now,
// asking epoll, which, unlike a read, does not consume a pending reset.
func readable(t *testing.T, c net.Conn) bool {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(ep)
	rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP}
		err = syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	var evs [1]syscall.EpollEvent
	n, err := syscall.EpollWait(ep, evs[:], 0)
	return err == nil && n == 1
}

// sendWaits returns once a goroutine is parked in Send's wait for the
// answer (or after wait.Timeout: the test then fails on what Send did), so
// that what the upstream does next comes while Send waits.
func sendWaits() {
	wait.Until(wait.Timeout, func() bool { return wait.Blocked("pool.(*sysConn).send(", "IO wait") })
}

// TestSend pins Send's contract: the whole request is written, and when
// Send returns the first read finds what ended the wait: the answer, the
// upstream's close or reset, or the read deadline.
func TestSend(t *testing.T) {
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	cases := []struct {
		name     string
		deadline time.Duration
		upstream func(s net.Conn) // after reading the request
		check    func(t *testing.T, first []byte, err error)
	}{
		{
			name: "answer comes later",
			upstream: func(s net.Conn) {
				sendWaits()
				s.Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
			},
			check: func(t *testing.T, first []byte, err error) {
				if err != nil || !bytes.HasPrefix(first, []byte("HTTP/1.1 200")) {
					t.Fatalf("first read = %q, %v", first, err)
				}
			},
		},
		{
			name:     "no answer within the read deadline",
			deadline: 50 * time.Millisecond,
			upstream: func(net.Conn) {},
			check: func(t *testing.T, first []byte, err error) {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("first read = %q, %v; want the deadline", first, err)
				}
			},
		},
		{
			name: "upstream closes",
			upstream: func(s net.Conn) {
				sendWaits()
				s.Close()
			},
			check: func(t *testing.T, first []byte, err error) {
				if err != io.EOF {
					t.Fatalf("first read = %q, %v; want EOF", first, err)
				}
			},
		},
		{
			name: "upstream resets",
			upstream: func(s net.Conn) {
				sendWaits()
				s.(*net.TCPConn).SetLinger(0)
				s.Close()
			},
			check: func(t *testing.T, first []byte, err error) {
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("first read = %q, %v; want a reset", first, err)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln := listen(t)
			c, s := pair(t, ln)
			got := make(chan []byte, 1)
			go func() {
				buf := make([]byte, len(req))
				io.ReadFull(s, buf)
				got <- buf
				tc.upstream(s)
			}()
			pc := NewConn(c, "k", nil, time.Now())
			if tc.deadline > 0 {
				pc.SetReadDeadline(time.Now().Add(tc.deadline))
			}
			n, err := pc.Send(req, 0)
			if n != len(req) || err != nil {
				t.Fatalf("Send = %d, %v; want %d, nil", n, err, len(req))
			}
			if tc.deadline == 0 && !readable(t, c) {
				t.Fatal("Send returned before the upstream answered or closed")
			}
			if b := <-got; !bytes.Equal(b, req) {
				t.Fatalf("upstream read %q", b)
			}
			buf := make([]byte, 64)
			m, err := pc.Read(buf)
			tc.check(t, buf[:m], err)
		})
	}
}

// TestSendMoreThanTheSocketTakes writes a request larger than the socket
// buffers (16 MiB; loopback's buffers take a few MiB at most, even while
// the upstream reads): Send writes the rest the ordinary way.
func TestSendMoreThanTheSocketTakes(t *testing.T) {
	ln := listen(t)
	c, s := pair(t, ln)
	req := bytes.Repeat([]byte("x"), 16<<20)
	done := make(chan int64, 1)
	go func() {
		n, _ := io.CopyN(io.Discard, s, int64(len(req)))
		s.Write([]byte("HTTP/1.1 204 No Content\r\n\r\n"))
		done <- n
	}()
	pc := NewConn(c, "k", nil, time.Now())
	if n, err := pc.Send(req, 10*time.Second); n != len(req) || err != nil {
		t.Fatalf("Send = %d, %v; want %d, nil", n, err, len(req))
	}
	if n := <-done; n != int64(len(req)) {
		t.Fatalf("upstream read %d bytes, want %d", n, len(req))
	}
}

// TestSendWriteTimeout: the write timeout bounds the part of a request
// that waits for room, against an upstream that reads nothing.
func TestSendWriteTimeout(t *testing.T) {
	ln := listen(t)
	c, _ := pair(t, ln)
	pc := NewConn(c, "k", nil, time.Now())
	pc.SetWriteDeadline(time.Now().Add(time.Hour)) // left from an earlier use
	req := make([]byte, 32<<20)
	n, err := pc.Send(req, 100*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 || n == len(req) {
		t.Fatalf("Send = %d, %v; want part of %d and the deadline", n, err, len(req))
	}
}

// TestSendWriteError: a write to a connection the upstream has reset fails
// as Write's would, naming both ends.
func TestSendWriteError(t *testing.T) {
	ln := listen(t)
	c, s := pair(t, ln)
	s.(*net.TCPConn).SetLinger(0)
	s.Close()
	wait.For(t, "the reset to arrive", func() bool { return readable(t, c) })
	pc := NewConn(c, "k", nil, time.Now())
	_, err := pc.Send([]byte("GET / HTTP/1.1\r\n\r\n"), 0)
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Send error = %v; want a reset or broken pipe", err)
	}
	if want := "write tcp " + c.LocalAddr().String() + "->" + c.RemoteAddr().String(); !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Send error = %q; want it to begin %q", err, want)
	}
}

// TestSendWithoutSocket: a connection that is not a socket is written to.
func TestSendWithoutSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go io.Copy(io.Discard, b)
	pc := NewConn(a, "k", nil, time.Now())
	if n, err := pc.Send([]byte("hello"), time.Second); n != 5 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
}

// TestNow: a Now reader takes what the socket holds and never waits.
func TestNow(t *testing.T) {
	ln := listen(t)
	c, s := pair(t, ln)
	pc := NewConn(c, "k", nil, time.Now())
	buf := make([]byte, 64)
	if n, err := pc.Now().Read(buf); n != 0 || err != ErrNothingYet {
		t.Fatalf("empty socket: %d, %v; want 0, ErrNothingYet", n, err)
	}
	s.Write([]byte("hello"))
	wait.For(t, "the bytes to arrive", func() bool { return readable(t, c) })
	if n, err := pc.Now().Read(buf); string(buf[:n]) != "hello" || err != nil {
		t.Fatalf("got %q, %v", buf[:n], err)
	}
	pc.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := pc.Now().Read(buf); err != ErrNothingYet {
		t.Fatalf("expired deadline: %v; want ErrNothingYet", err)
	}
	pc.SetReadDeadline(time.Time{})
	s.(*net.TCPConn).SetLinger(0)
	s.Close()
	wait.For(t, "the reset to arrive", func() bool { return readable(t, c) })
	if _, err := pc.Now().Read(buf); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after a reset: %v; want ECONNRESET", err)
	}
}
