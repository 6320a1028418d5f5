//go:build unix

package pool

import (
	"io"
	"net"
	"os"
	"syscall"

	"github.com/sluice-proxy/sluice/internal/sock"
)

// sysConn holds what the liveness check, the watcher and Send need of the
// socket, found once per connection so that none allocates per request.
type sysConn struct {
	rc   syscall.RawConn
	fd   int
	live bool
	peek func(fd uintptr)
	buf  [1]byte

	// send's state, kept here so that its callback is made once, and
	// the addresses its errors name, as the net package's do
	local, remote net.Addr
	out           []byte
	wrote         int
	werr          error
	sent          bool
	write         func(fd uintptr) bool

	// readNow's and readIdle's state
	in    []byte
	got   int
	rerr  error
	read1 func(fd uintptr) bool
	idle1 func(fd uintptr)
}

// network names the socket's network in errors, as the net package's
// do: "tcp", or "unix" for a server on a Unix domain socket.
func (s *sysConn) network() string {
	if s.remote != nil {
		return s.remote.Network()
	}
	return "tcp"
}

func (s *sysConn) init(c net.Conn) {
	rc, fd, ok := sock.Raw(c)
	s.fd = fd
	if !ok {
		return
	}
	s.rc, s.local, s.remote = rc, c.LocalAddr(), c.RemoteAddr()
	s.peek = func(fd uintptr) {
		_, err := sock.Peek(int(fd), s.buf[:])
		// EAGAIN: nothing to read, the connection is fine. EOF (n == 0),
		// an error such as ECONNRESET, or a byte nobody asked for: dead.
		s.live = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR
	}
	s.write = func(fd uintptr) bool {
		if s.sent {
			return true // the poller reports the answer's first bytes, or the wait ended
		}
		s.sent = true
		for {
			n, err := sock.Write(int(fd), s.out[s.wrote:])
			if n > 0 {
				s.wrote += n
			}
			if err == syscall.EINTR {
				continue
			}
			if err != nil && err != syscall.EAGAIN {
				s.werr = err
			}
			// Wait for the answer only once all of the request is out;
			// otherwise Send writes the rest the ordinary way.
			return s.wrote < len(s.out) || s.werr != nil
		}
	}
	s.read1 = func(fd uintptr) bool {
		s.readOnce(fd, ErrNothingYet)
		return true
	}
	s.idle1 = func(fd uintptr) { s.readOnce(fd, errWouldBlock) }
}

// readOnce makes one read(2) into s.in; none is reported as nothing.
func (s *sysConn) readOnce(fd uintptr, nothing error) {
	n, err := sock.Read(int(fd), s.in)
	switch {
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR:
		s.got, s.rerr = 0, nothing
	case err != nil:
		s.got, s.rerr = 0, &net.OpError{Op: "read", Net: s.network(), Source: s.local, Addr: s.remote, Err: os.NewSyscallError("read", err)}
	case n == 0:
		s.got, s.rerr = 0, io.EOF
	default:
		s.got, s.rerr = n, nil
	}
}

// readIdle makes one read(2) into p and does not wait, whatever deadline
// the connection has (a read deadline left from its last response may have
// passed while it idled): through Control, as alive peeks. It is the
// TLS layer's read while the pool checks an idle TLS connection, and
// reports an empty socket, or a connection that is not a socket, as
// errWouldBlock.
func (s *sysConn) readIdle(p []byte) (int, error) {
	if s.rc == nil {
		return 0, errWouldBlock
	}
	s.in, s.got, s.rerr = p, 0, errWouldBlock
	if err := s.rc.Control(s.idle1); err != nil {
		s.in = nil
		return 0, err
	}
	s.in = nil
	return s.got, s.rerr
}

// writeIdle writes p with one write(2) that does not wait, whatever
// deadline the connection has, for the close_notify of a TLS connection
// being closed; on a connection that is not a socket it writes to c.
func (s *sysConn) writeIdle(p []byte, c net.Conn) (int, error) {
	if s.rc == nil {
		return c.Write(p)
	}
	var n int
	var werr error
	err := s.rc.Control(func(fd uintptr) {
		n, werr = syscall.Write(int(fd), p)
	})
	if err == nil {
		err = werr
	}
	if n < 0 {
		n = 0
	}
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return n, err
}

// readNow makes one read(2) into p and does not wait. When the poller
// refuses the read (an expired deadline, a closed connection), it reports
// nothing yet: an ordinary read reports that.
func (s *sysConn) readNow(p []byte) (int, error) {
	if s.rc == nil {
		return 0, ErrNothingYet
	}
	s.in, s.got, s.rerr = p, 0, ErrNothingYet
	s.rc.Read(s.read1)
	s.in = nil
	return s.got, s.rerr
}

// alive reports whether an idle connection can still carry a request: its
// peer has not closed or reset it and has sent nothing unasked (an idle
// HTTP/1.1 server never speaks first; a stray byte is most likely a 408 or
// the start of a close). It does one non-blocking MSG_PEEK, through
// Control rather than Read: a read deadline left from the connection's last
// response may have passed while it idled, and Read would report that
// instead of looking at the socket.
func (s *sysConn) alive() bool {
	if s.rc == nil {
		return true
	}
	s.live = false
	if err := s.rc.Control(s.peek); err != nil {
		return false
	}
	return s.live
}

// send writes req with one write(2) from inside a RawConn.Read, whose
// poller registration is re-armed before the callback runs, and, if all of
// req went out, waits there until the socket is readable. It reports
// whether it wrote at all (false: the connection cannot be used this way,
// or was closed); a write error comes back as Write would return it.
func (s *sysConn) send(req []byte) (n int, tried bool, err error) {
	if s.rc == nil {
		return 0, false, nil
	}
	s.out, s.wrote, s.werr, s.sent = req, 0, nil, false
	// An error of the wait itself (the read deadline passed, the
	// connection was closed) is left for the next Read to report.
	s.rc.Read(s.write)
	n, tried, err = s.wrote, s.sent, s.werr
	s.out, s.werr = nil, nil
	if err != nil {
		err = &net.OpError{Op: "write", Net: s.network(), Source: s.local, Addr: s.remote, Err: os.NewSyscallError("write", err)}
	}
	return n, tried, err
}
