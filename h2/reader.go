package h2

import (
	"crypto/tls"
	"net"
	"sync"
)

// connReader is the Framer's input: first the prefix the caller had already
// read, then the connection. What it holds while the connection is idle is
// what an idle HTTP/2 connection costs, so it holds no large buffer then:
//
//   - over TLS it reads straight into the Framer's slices: crypto/tls
//     already reads whole records into a buffer of its own, so a second
//     one would only copy;
//   - on a plain connection it reads into a small buffer of its own (a
//     frame header and a small frame in one read), and borrows a large one
//     from a pool only while the last read filled its buffer, that is
//     while more is likely waiting; a read that finds less than a full
//     buffer ends the borrowing. A read that blocks, as the wait for the
//     next frame of an idle connection does, blocks in the small buffer
//     unless the client stopped exactly at a buffer's end.
type connReader struct {
	nc     net.Conn
	k      kicker // told before each wait for input
	prefix []byte
	direct bool // nc buffers what it reads (TLS)
	small  [smallReadSize]byte
	buf    []byte  // small[:], or *big while borrowed
	big    *[]byte // borrowed from readBufs
	r, w   int     // what buf holds unread
	full   bool    // the last read filled its buffer
	err    error   // the first error reading the connection, kept
}

const (
	smallReadSize = 512
	readBufSize   = 16 << 10
)

var readBufs = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// kicker is the side of a connection that writes what it owes the peer;
// kick starts that writing without waiting for it.
type kicker interface{ kick() }

func newConnReader(k kicker, nc net.Conn, prefix []byte) connReader {
	_, direct := nc.(*tls.Conn)
	return connReader{nc: nc, k: k, prefix: prefix, direct: direct}
}

func (cr *connReader) Read(p []byte) (int, error) {
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
	cr.k.kick()
	if cr.direct || len(p) >= readBufSize {
		n, err := cr.nc.Read(p)
		if err != nil {
			cr.err = err
			if n > 0 {
				return n, nil
			}
		}
		return n, err
	}
	if cr.full {
		cr.big = readBufs.Get().(*[]byte)
		cr.buf = *cr.big
	} else {
		cr.buf = cr.small[:]
	}
	n, err := cr.nc.Read(cr.buf)
	cr.r, cr.w = 0, n
	cr.full = n == len(cr.buf)
	if err != nil {
		cr.err = err
	}
	if n == 0 {
		cr.release()
		return 0, err
	}
	k := copy(p, cr.buf[:n])
	cr.r = k
	if cr.r == cr.w {
		cr.release()
	}
	return k, nil
}

// release gives back a borrowed buffer once it holds nothing unread.
func (cr *connReader) release() {
	if cr.big != nil {
		readBufs.Put(cr.big)
		cr.big = nil
	}
	cr.buf = nil
	cr.r, cr.w = 0, 0
}
