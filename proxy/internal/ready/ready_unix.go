//go:build unix

package ready

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/sock"
)

// ErrWouldBlock is what a reader of what the socket holds now returns when
// it holds nothing.
var ErrWouldBlock = errors.New("would block")

// Socket reads a client connection through its raw socket, for two
// reads the net package cannot do:
//
//   - FillIdle waits for the next request holding no read buffer: it takes
//     a buffer from the pool only when bytes are there, so an idle
//     keep-alive connection costs only its goroutine and small structures.
//     Each time bytes come it lets inline serve what it can, and goes on
//     waiting while inline reports the connection idle again. Its first
//     wait makes the system calls of a plain Read (a read that finds
//     nothing, then the poller, then the read that succeeds); the waits
//     after inline served a request skip the read that finds nothing.
//   - FillHead waits for more of a request head that has begun, holding
//     its bytes so far in a buffer of their size (h1.Reader.Stash): a read
//     buffer is taken only when bytes are there, and given back when the
//     read leaves the head incomplete, so a client that sends its head a
//     byte at a time costs little more than an idle one.
//   - Reader reads what the socket holds now, never waiting.
//
// On a TLS connection none of these reads the socket: what it holds is
// records, not requests, and crypto/tls may hold records already read from
// it (a request that came with the one before, say) while the socket is
// empty, so that a wait for the socket's Socket could miss a request
// that has come. There the waits read through TLS, holding a read buffer
// while they wait, and give it back when they time out; reader finds
// nothing; inline serving is off. What stays is the parker (park_linux.go):
// a connection parks only after a read through TLS timed out, and such a
// read reads the socket only when crypto/tls holds no whole record, so
// that the next request must bring bytes to the socket, which wake it.
// Discard reads the socket itself, for a close's lingering reads, whose
// bytes are thrown away.
type Socket struct {
	nc       net.Conn
	fd       int // the socket, for a parker; -1 when unknown
	rc       syscall.RawConn
	inline   Inliner               // or nil
	requests bool                  // the socket's bytes are requests, read here
	fill     func(fd uintptr) bool // made by the first wait (makeFill)
	readNow  func(fd uintptr) bool
	r        *h1.Reader
	err      error
	nb       nonblock

	// inside is set while fill runs inline: reads then go straight to
	// the socket, which is read-locked by fill's RawConn.Read. drained
	// records whether the last read left the socket empty.
	inside  bool
	drained bool

	// head is set while fillHead runs: the largest head allowed.
	head int
}

// Inliner serves the requests a wait for the next one finds (FillIdle):
// ServeInline serves those it can and reports whether the connection is
// idle again.
type Inliner interface{ ServeInline() bool }

// Init readies w to read nc into r, serving requests inline when inline
// is set. requests says whether nc's bytes are requests: false for the
// socket under a TLS connection, whose reads then go through r's own
// source, the TLS connection.
func (w *Socket) Init(nc net.Conn, r *h1.Reader, inline Inliner, requests bool) {
	w.fd, w.r = -1, r
	if !requests {
		// The parker may wait for the ClientHello: the descriptor is
		// wanted before any read.
		rc, fd, ok := sock.Raw(nc)
		if !ok {
			return
		}
		w.fd, w.rc = fd, rc
	} else {
		// The descriptor is learnt from the first read or write (its
		// callback is given it), or asked for when wanted before (FD):
		// asking at once would cost a connection two allocations.
		rc, ok := sock.RawConn(nc)
		if !ok {
			return
		}
		w.rc = rc
	}
	w.nc, w.nb.w = nc, w
	w.readNow = func(fd uintptr) bool {
		w.fd = int(fd)
		if w.nb.write {
			w.writeOnce(int(fd))
			return true
		}
		n, err := sock.Read(int(fd), w.nb.p)
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			w.nb.n, w.nb.err = 0, ErrWouldBlock
		case err != nil:
			w.nb.n, w.nb.err = 0, err
		case n == 0:
			w.nb.n, w.nb.err = 0, io.EOF
		default:
			w.nb.n, w.nb.err = n, nil
		}
		w.drained = w.nb.n < len(w.nb.p)
		return true
	}
	w.requests, w.inline = requests, inline
}

// makeFill makes the callback of the waits, on the first: a connection
// whose requests all came by the time it was served (see conn.readFirst)
// never waits, and never makes it.
func (w *Socket) makeFill() {
	w.fill = func(fd uintptr) bool {
		w.fd = int(fd)
		for {
			var buf []byte
			if w.head > 0 {
				buf = w.r.GrabHead(w.head)
			} else {
				buf = w.r.Grab()
			}
			n, err := sock.Read(int(fd), buf)
			switch {
			case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
				// Nothing yet: wait for the poller, holding no read
				// buffer.
				if w.head > 0 {
					w.r.Stash()
				} else {
					w.r.Release()
				}
				return false
			case err == syscall.EINTR:
				return false
			case err != nil:
				w.err = err
				return true
			case n == 0:
				w.err = io.EOF
				return true
			}
			w.r.Commit(n)
			w.err = nil
			w.drained = n < len(buf)
			if w.inline == nil || w.head > 0 {
				return true
			}
			w.inside = true
			idle := w.inline.ServeInline()
			w.inside = false
			if !idle {
				return true
			}
			// Served inline and idle again. A read that did not fill
			// the buffer drained the socket, and the poller, armed
			// before it, reports whatever comes after: wait for that
			// report instead of reading now and finding nothing.
			if w.drained {
				return false
			}
		}
	}
}

// FillIdle reads the next bytes into r, waiting (within the connection's
// read deadline) without holding a buffer.
func (w *Socket) FillIdle() error {
	if !w.requests {
		err := w.r.Fill()
		if err != nil {
			w.r.Release()
		}
		return err
	}
	if w.fill == nil {
		w.makeFill()
	}
	if err := w.rc.Read(w.fill); err != nil {
		return err
	}
	return w.err
}

// FillHead reads more of a request head of at most max bytes into r,
// waiting (within the connection's read deadline) with the bytes so far
// stashed. When it returns, r holds a read buffer again only if bytes came.
func (w *Socket) FillHead(max int) error {
	if !w.requests {
		err := w.r.FillHead(max)
		if err != nil {
			w.r.Stash()
		}
		return err
	}
	if w.fill == nil {
		w.makeFill()
	}
	w.head = max
	err := w.rc.Read(w.fill)
	w.head = 0
	if err != nil {
		return err
	}
	return w.err
}

// nonblock reads what the socket holds now: one read(2), whose EAGAIN
// comes back as ErrWouldBlock. With write set, readNow writes p instead
// (WriteNow), so that one callback made at Init serves both.
type nonblock struct {
	w     *Socket
	p     []byte
	n     int
	err   error
	write bool
}

// writeOnce writes w.nb.p to fd with one write(2) (again after EINTR).
func (w *Socket) writeOnce(fd int) {
	for {
		n, err := sock.Write(fd, w.nb.p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			w.nb.n, w.nb.err = 0, ErrWouldBlock
		case err != nil:
			w.nb.n, w.nb.err = 0, &net.OpError{Op: "write", Net: w.nc.LocalAddr().Network(),
				Source: w.nc.LocalAddr(), Addr: w.nc.RemoteAddr(), Err: os.NewSyscallError("write", err)}
		default:
			w.nb.n, w.nb.err = n, nil
		}
		return
	}
}

// WriteNow writes p to the socket with one write(2) that never waits,
// whatever the connection's write deadline, and returns how much of p the
// socket took: ErrWouldBlock when it had no room for any of it, or the
// write's error as the connection's Write would return it, or the
// poller's refusal (a closed connection, an expired deadline). A connection whose answer fits the socket's buffer,
// as most do, then needs no write deadline for it. On a TLS connection,
// whose bytes must go through TLS, it writes nothing: ErrWouldBlock.
func (w *Socket) WriteNow(p []byte) (int, error) {
	if !w.requests {
		return 0, ErrWouldBlock
	}
	w.nb.p, w.nb.write = p, true
	err := w.rc.Write(w.readNow)
	w.nb.p, w.nb.write = nil, false
	if err != nil {
		return 0, err
	}
	return w.nb.n, w.nb.err
}

func (nb *nonblock) Read(p []byte) (int, error) {
	nb.p = p
	if nb.w.inside {
		nb.w.readNow(uintptr(nb.w.fd))
	} else if err := nb.w.rc.Read(nb.w.readNow); err != nil {
		return 0, err
	}
	return nb.n, nb.err
}

// Reader returns a reader of the requests the socket holds now, never
// waiting; on TLS, it finds nothing.
func (w *Socket) Reader() io.Reader {
	if !w.requests {
		return neverReader{}
	}
	return &w.nb
}

// Discard returns a reader of what the socket holds now, never waiting,
// TLS or not: for bytes to throw away.
func (w *Socket) Discard() io.Reader {
	if w.rc == nil {
		return neverReader{}
	}
	return &w.nb
}

type neverReader struct{}

func (neverReader) Read([]byte) (int, error) { return 0, ErrWouldBlock }

// FD returns the socket's descriptor, for a parker to watch; -1 when
// unknown (a net.Pipe in tests) or closed.
func (w *Socket) FD() int {
	if w.fd < 0 && w.rc != nil {
		w.fd = sock.FD(w.rc)
	}
	return w.fd
}

// Raw reports whether the raw socket can be read (Init found one).
func (w *Socket) Raw() bool { return w.rc != nil }

// Drained reports whether the last read left the socket empty.
func (w *Socket) Drained() bool { return w.drained }

// Pending reports whether bytes from the client wait unread on the
// socket: one non-blocking MSG_PEEK. It is false where the socket is
// unknown.
func (w *Socket) Pending() bool {
	if w.rc == nil {
		return false
	}
	var n int
	var b [1]byte
	w.rc.Control(func(fd uintptr) {
		n, _ = sock.Peek(int(fd), b[:])
	})
	return n > 0
}

// Readable waits, within the socket's read deadline, for bytes to come,
// reading none.
func (w *Socket) Readable() error {
	if w.rc == nil {
		return ErrWouldBlock
	}
	waited := false
	return w.rc.Read(func(uintptr) bool {
		done := waited
		waited = true
		return done
	})
}
