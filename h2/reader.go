package h2

import (
	"crypto/tls"
	"net"
	"sync"
	"time"
)

// connReader is the Framer's input: first the prefix the caller had already
// read, then the connection. What it holds while the connection is idle is
// what an idle HTTP/2 connection costs, so it holds no buffer then:
//
//   - over TLS it reads straight into the Framer's slices: crypto/tls
//     already reads whole records into a buffer of its own, so a second
//     one would only copy;
//   - on a plain connection it reads into a small buffer borrowed from a
//     pool (a frame header and a small frame in one read), and borrows a
//     large one while the last read filled its buffer, that is while more
//     is likely waiting; a read that finds less than a full buffer ends
//     the large borrowing. Either goes back once read.
type connReader struct {
	nc     net.Conn
	c      *core // what it reads for
	prefix []byte
	direct bool    // nc buffers what it reads (TLS)
	buf    []byte  // *held while it is borrowed
	held   *[]byte // from smallBufs, or from readBufs when big
	big    bool
	r, w   int   // what buf holds unread
	full   bool  // the last read filled its buffer
	taken  int   // bytes given out since the frame began (begin)
	parked bool  // the last read timed out for the connection to park (parkRead)
	err    error // the first error reading the connection, kept
}

const (
	smallReadSize = 512
	readBufSize   = 16 << 10
)

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, smallReadSize); return &b }}
	readBufs  = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}
)

// What a read that timed out is to do, as the connection's end decides
// (endpoint.timedOut).
type onTimeout uint8

const (
	failRead onTimeout = iota // the timeout is the connection's error, kept
	readOn                    // the deadline was moved: read again
	parkRead                  // return the timeout, kept for this read only: the connection parks
)

func newConnReader(c *core, nc net.Conn, prefix []byte) connReader {
	_, direct := nc.(*tls.Conn)
	return connReader{nc: nc, c: c, prefix: prefix, direct: direct}
}

// begin marks the start of a frame.
func (cr *connReader) begin() { cr.taken = 0 }

func (cr *connReader) Read(p []byte) (int, error) {
	n, err := cr.read(p)
	cr.taken += n
	return n, err
}

func (cr *connReader) read(p []byte) (int, error) {
	if len(cr.prefix) > 0 {
		n := copy(p, cr.prefix)
		cr.prefix = cr.prefix[n:]
		if len(cr.prefix) == 0 {
			cr.prefix = nil
		}
		return n, nil
	}
	if cr.r < cr.w {
		n := copy(p, cr.buf[cr.r:cr.w])
		cr.r += n
		if cr.r == cr.w {
			cr.release()
		}
		return n, nil
	}
	if cr.err != nil {
		return 0, cr.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	// About to wait for the peer: let what we owe it go first.
	cr.c.kick()
	for {
		n, err := cr.readConn(p)
		if err == nil {
			return n, nil
		}
		if isTimeout(err) {
			switch cr.c.end.timedOut(cr.taken > 0 || n > 0) {
			case readOn:
				if n > 0 {
					return n, nil
				}
				continue
			case parkRead:
				cr.parked = true
				return 0, err
			}
		}
		cr.err = err
		if n > 0 {
			return n, nil
		}
		return 0, err
	}
}

// readConn reads from the connection into p, through a borrowed buffer on
// a plain connection unless p is large.
func (cr *connReader) readConn(p []byte) (int, error) {
	if cr.direct || len(p) >= readBufSize {
		return cr.nc.Read(p)
	}
	cr.borrow(cr.full)
	n, err := cr.nc.Read(cr.buf)
	cr.full = n == len(cr.buf)
	k := copy(p, cr.buf[:n])
	cr.r, cr.w = k, n
	if cr.r == cr.w {
		cr.release()
	}
	return k, err
}

// borrow takes a buffer to read into: a large one when big.
func (cr *connReader) borrow(big bool) {
	pool := &smallBufs
	if big {
		pool = &readBufs
	}
	cr.held, cr.big = pool.Get().(*[]byte), big
	cr.buf = *cr.held
}

// release gives back a borrowed buffer once it holds nothing unread.
func (cr *connReader) release() {
	if cr.held != nil {
		if cr.big {
			readBufs.Put(cr.held)
		} else {
			smallBufs.Put(cr.held)
		}
		cr.held = nil
	}
	cr.buf = nil
	cr.r, cr.w = 0, 0
}

// linger half-closes the connection and reads what the peer still sends,
// for goAwayLinger at most (and 1 MiB), before the close: closing with
// unread input would reset the connection, and the peer could lose what
// was sent last (a GOAWAY saying why).
func (cr *connReader) linger() {
	cw, ok := cr.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	cr.nc.SetReadDeadline(time.Now().Add(goAwayLinger))
	cr.release()
	var b [512]byte
	for n := 0; n < 1<<20; {
		k, err := cr.nc.Read(b[:])
		n += k
		if err != nil {
			break
		}
	}
}
