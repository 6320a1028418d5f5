package h2

import (
	"net"
	"sync"
)

// connReader is the Framer's input: first the prefix the caller had already
// read, then the connection. It buffers, but holds a buffer only while
// frames are arriving: when its buffer is empty it returns it to a pool and
// waits for input reading straight into the Framer's own small slice (the
// 9-byte frame header of the next frame, on an idle connection), so that an
// idle connection holds no read buffer. Only when that read brought
// something does it borrow a buffer to take in what follows in one read.
type connReader struct {
	nc     net.Conn
	k      kicker // told before each wait for input
	prefix []byte
	buf    *[]byte // borrowed from readBufs, nil when empty
	r, w   int
	hot    bool  // the last read from the connection returned data
	err    error // the first error reading the connection, kept
}

// kicker is the side of a connection that writes what it owes the peer;
// kick starts that writing without waiting for it.
type kicker interface{ kick() }

const readBufSize = 16 << 10

var readBufs = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

func (cr *connReader) Read(p []byte) (int, error) {
	if len(cr.prefix) > 0 {
		n := copy(p, cr.prefix)
		cr.prefix = cr.prefix[n:]
		if len(cr.prefix) == 0 {
			cr.prefix = nil
		}
		return n, nil
	}
	if cr.buf != nil {
		n := copy(p, (*cr.buf)[cr.r:cr.w])
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
	// About to wait for the client: let what we owe it go first.
	cr.k.kick()
	if !cr.hot || len(p) >= readBufSize {
		n, err := cr.nc.Read(p)
		cr.hot = n > 0
		if err != nil {
			cr.err = err
			if n > 0 {
				return n, nil
			}
		}
		return n, err
	}
	cr.hot = false
	cr.buf = readBufs.Get().(*[]byte)
	n, err := cr.nc.Read(*cr.buf)
	cr.r, cr.w = 0, n
	if err != nil {
		cr.err = err
	}
	if n == 0 {
		cr.release()
		return 0, err
	}
	k := copy(p, (*cr.buf)[:n])
	cr.r = k
	if cr.r == cr.w {
		cr.release()
	}
	return k, nil
}

func (cr *connReader) release() {
	if cr.buf != nil {
		readBufs.Put(cr.buf)
		cr.buf = nil
	}
	cr.r, cr.w = 0, 0
}
