package sock

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Conn is a TCP connection whose Read and Write make their system calls
// as the package's Read and Write do, unseen by the scheduler. They wait
// through the descriptor's poller as the net package's own do: deadlines,
// Close and readiness behave as with the *net.TCPConn it embeds, whose
// other methods it keeps. It is what sits under crypto/tls and HTTP/2,
// whose every frame or record is a read or a write.
type Conn struct {
	*net.TCPConn
	rc   syscall.RawConn
	r, w op
	// wto is the write timeout (SetWriteTimeout); made negative while
	// the deadline it set for a write that waits is to be cleared.
	wto time.Duration
}

// op is the state of the Read or the Write under way, which the callback
// given to the RawConn, made once, finds there.
type op struct {
	mu    sync.Mutex // one Read (one Write) at a time, as the poller's lock would
	p     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// Wrap returns nc as a *Conn when it is a TCP connection, nc otherwise.
func Wrap(nc net.Conn) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	c := &Conn{TCPConn: tc, rc: rc}
	c.r.fn = func(fd uintptr) bool {
		n, err := Read(int(fd), c.r.p)
		for err == syscall.EINTR {
			n, err = Read(int(fd), c.r.p)
		}
		if err == syscall.EAGAIN {
			return false // wait for the poller
		}
		if err != nil {
			c.r.errno = err.(syscall.Errno)
		} else {
			c.r.n = n
		}
		return true
	}
	c.w.fn = func(fd uintptr) bool {
		for len(c.w.p) > 0 {
			n, err := Write(int(fd), c.w.p)
			if n > 0 {
				c.w.n += n
				c.w.p = c.w.p[n:]
			}
			switch {
			case err == syscall.EAGAIN:
				if d := c.wto; d != 0 {
					// The socket's buffer is full: the wait for room,
					// not the write, is what the timeout bounds, each
					// wait (each after progress) from its start.
					d = max(d, -d)
					c.TCPConn.SetWriteDeadline(time.Now().Add(d))
					c.wto = -d
				}
				return false
			case err != nil && err != syscall.EINTR:
				c.w.errno = err.(syscall.Errno)
				return true
			}
		}
		return true
	}
	return c
}

// TCP returns the TCP connection nc is or wraps.
func TCP(nc net.Conn) (*net.TCPConn, bool) {
	switch c := nc.(type) {
	case *net.TCPConn:
		return c, true
	case *Conn:
		return c.TCPConn, true
	}
	return nil, false
}

// Read reads as net.TCPConn's Read does: at least one byte, io.EOF at the
// end, an *net.OpError otherwise.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := c.do(&c.r, p, c.rc.Read, "read")
	if n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// Write writes all of p, as net.TCPConn's Write does.
func (c *Conn) Write(p []byte) (int, error) { return c.do(&c.w, p, c.rc.Write, "write") }

// SetWriteTimeout bounds each wait of a Write for room in the socket's
// buffer by d: a peer that stops reading fails the write with a deadline
// error after d, as a write deadline set before each Write would, without
// the deadline a Write that does not wait (most do) would cost. 0 removes
// the bound. A Conn given a write timeout must not be given write
// deadlines: a Write that waited clears its own. Call it before writing,
// not during a Write.
func (c *Conn) SetWriteTimeout(d time.Duration) { c.wto = max(d, 0) }

// do runs o's callback on p through wait, the RawConn's Read or Write,
// which calls it again each time the socket is ready until it reports done.
func (c *Conn) do(o *op, p []byte, wait func(func(uintptr) bool) error, name string) (int, error) {
	o.mu.Lock()
	o.p, o.n, o.errno = p, 0, 0
	err := wait(o.fn)
	n, errno := o.n, o.errno
	o.p = nil
	if o == &c.w && c.wto < 0 {
		c.wto = -c.wto
		c.TCPConn.SetWriteDeadline(time.Time{})
	}
	o.mu.Unlock()
	if err == nil && errno != 0 {
		err = os.NewSyscallError(name, errno)
	}
	if err != nil {
		return n, &net.OpError{Op: name, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return n, nil
}
