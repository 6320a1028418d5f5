package h1

import (
	"bytes"
	"io"
	"math/bits"
	"sync"
	"time"
)

// Reader is a buffered reader for one HTTP/1.x connection. It reads message
// heads whole (ReadHead) and bodies in segments (Body), counts every byte it
// takes from the connection, and gives its buffer back to a shared pool when
// it is empty (Release), so an idle connection holds no buffer.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	src  io.Reader
	bp   *[]byte // pooled storage behind buf
	buf  []byte
	r, w int
	scan int // bytes after r already searched for the end of a head
	// head is the length of the head at r once headEnd found its end (0:
	// not found yet), so that asking again (HasHead, then ReadHead) does
	// not search again. It goes with scan: both are reset when r moves
	// past a head.
	head int
	// N counts the bytes read from the connection so far.
	N int64

	timeout time.Duration // per-read deadline, when src can take one
}

type readDeadliner interface{ SetReadDeadline(time.Time) error }

// SetReadTimeout makes every later read from the connection fail when no
// byte arrives within d (0 = no limit set by b; a deadline set on the
// connection by the caller then applies). It needs a src with a
// SetReadDeadline method, such as a net.Conn.
func (b *Reader) SetReadTimeout(d time.Duration) { b.timeout = d }

// NewReader returns a Reader for src. Its buffer is taken from the pool on
// first use.
func NewReader(src io.Reader) *Reader { return &Reader{src: src} }

// Reset makes b read from src, dropping any buffered bytes.
func (b *Reader) Reset(src io.Reader) {
	b.src = src
	b.r, b.w, b.scan, b.head, b.N, b.timeout = 0, 0, 0, 0, 0, 0
}

// Buffered reports how many bytes are buffered and not yet consumed.
func (b *Reader) Buffered() int { return b.w - b.r }

// Peek returns the buffered, unconsumed bytes without consuming them.
func (b *Reader) Peek() []byte { return b.buf[b.r:b.w] }

// Discard consumes n buffered bytes; n must not exceed Buffered.
func (b *Reader) Discard(n int) {
	b.r += n
	b.scan, b.head = 0, 0
}

// Release gives the buffer back to the pool when nothing is buffered. It is
// cheap to call; the next read takes a buffer again.
func (b *Reader) Release() {
	if b.bp != nil && b.r == b.w {
		putBuf(b.bp)
		b.bp, b.buf = nil, nil
		b.r, b.w, b.scan, b.head = 0, 0, 0, 0
	}
}

// Stash readies b to wait for the rest of a message head holding as little
// memory as the bytes so far need: the unread bytes move to a buffer of
// their size (256 B to 2 KiB, pooled) and the read buffer goes back to the
// pool. With nothing unread it is Release; unread bytes that need a read
// buffer's size stay where they are. The next read (Fill, Grab, GrabHead,
// ReadHead) takes a read buffer again, so a connection that sends its head
// a byte at a time holds a read buffer only while a read runs.
func (b *Reader) Stash() {
	n := b.w - b.r
	if n == 0 {
		b.Release()
		return
	}
	c := bufClass(n)
	if b.bp == nil || minStash<<c >= min(minBuf, len(b.buf)) {
		return
	}
	sp := getBuf(n)
	b.w = copy(*sp, b.buf[b.r:b.w])
	b.r = 0
	putBuf(b.bp)
	b.bp, b.buf = sp, *sp
}

// GrabHead is Grab for reading the rest of a message head of at most max
// bytes: a full buffer grows (doubling, up to max+4) as ReadHead's own
// reads make it.
func (b *Reader) GrabHead(max int) []byte {
	if len(b.buf) < minBuf {
		b.growTo(minBuf)
	}
	b.makeRoom(max + 4)
	return b.buf[b.w:]
}

// FillHead reads once from the connection, as Fill does, into the room
// GrabHead makes.
func (b *Reader) FillHead(max int) error {
	b.GrabHead(max)
	return b.Fill()
}

// Fill reads once from the connection into free buffer space and reports the
// first error. It returns io.EOF only when the read returned nothing.
func (b *Reader) Fill() error {
	if len(b.buf) < minBuf {
		b.growTo(minBuf) // none yet, or a stash
	}
	if b.r > 0 && b.r == b.w {
		b.r, b.w = 0, 0
	}
	if b.w == len(b.buf) {
		if b.r == 0 {
			return errBufferFull
		}
		// Compact: move the unread bytes to the front.
		copy(b.buf, b.buf[b.r:b.w])
		b.w -= b.r
		b.r = 0
	}
	if b.timeout > 0 {
		if c, ok := b.src.(readDeadliner); ok {
			c.SetReadDeadline(time.Now().Add(b.timeout))
		}
	}
	n, err := b.src.Read(b.buf[b.w:])
	b.w += n
	b.N += int64(n)
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

var errBufferFull = errorf(500, "h1: reader buffer full")

// Full reports whether the last read filled the buffer: the connection
// may hold more bytes already.
func (b *Reader) Full() bool { return b.bp != nil && b.w == len(b.buf) }

// Grow makes the buffer at least n bytes, for reading a large body in
// fewer, larger reads; the larger buffer goes back to the pool on Release.
func (b *Reader) Grow(n int) {
	if b.bp == nil || len(b.buf) < n {
		if b.bp == nil {
			b.bp = getBuf(n)
			b.buf = *b.bp
			b.r, b.w = 0, 0
			return
		}
		b.growTo(n)
	}
}

// Grab returns the free space at the end of the buffer, taking a buffer
// from the pool when b has none, for a caller that reads the connection
// itself (a read that must not hold a buffer while it waits). Commit the
// bytes read, or Release if none.
func (b *Reader) Grab() []byte {
	if len(b.buf) < minBuf {
		b.growTo(minBuf) // none yet, or a stash
	}
	if b.r > 0 && b.r == b.w {
		b.r, b.w = 0, 0
	}
	if b.w == len(b.buf) && b.r > 0 {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	return b.buf[b.w:]
}

// Commit adds n bytes read into the space Grab returned.
func (b *Reader) Commit(n int) {
	b.w += n
	b.N += int64(n)
}

// FillWith reads once from src instead of the connection (a non-blocking
// read of the same socket, say), into free buffer space, growing the
// buffer to hold at least want unread bytes when it is smaller. The bytes
// count in N.
func (b *Reader) FillWith(src io.Reader, want int) (int, error) {
	if b.bp == nil {
		b.bp = getBuf(max(minBuf, want))
		b.buf = *b.bp
	}
	if b.r > 0 {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	if len(b.buf) < want {
		b.growTo(want)
	}
	n, err := src.Read(b.buf[b.w:])
	b.w += n
	b.N += int64(n)
	return n, err
}

// growTo makes room for at least n unread bytes in the buffer.
func (b *Reader) growTo(n int) {
	if len(b.buf) >= n {
		return
	}
	nbp := getBuf(n)
	b.w = copy(*nbp, b.buf[b.r:b.w])
	b.r = 0
	if b.bp != nil {
		putBuf(b.bp)
	}
	b.bp, b.buf = nbp, *nbp
}

// ReadHead reads one complete message head, from its first line through the
// empty line that ends it, and returns it; the slice is valid until the next
// call on b. A head longer than max bytes fails with ErrHeadTooLarge (or
// ErrURITooLong when not even the first line fits). When skipEmpty is set,
// empty lines before the head are skipped (RFC 9112 §2.2, for requests).
//
// At a clean end of input before any byte of a head it returns io.EOF; in the
// middle of a head, io.ErrUnexpectedEOF. Other read errors are returned as is.
func (b *Reader) ReadHead(max int, skipEmpty bool) ([]byte, error) {
	for {
		if skipEmpty {
			b.skipEmptyLines()
		}
		if end := b.headEnd(); end > 0 {
			if end > max {
				return nil, b.tooLarge(max)
			}
			head := b.buf[b.r : b.r+end]
			b.r += end
			b.scan, b.head = 0, 0
			return head, nil
		}
		if b.w-b.r >= max {
			return nil, b.tooLarge(max)
		}
		b.makeRoom(max + 4)
		if err := b.Fill(); err != nil {
			if err == io.EOF && b.r < b.w {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// makeRoom readies a full buffer for Fill: it moves the unread bytes to the
// front, or, when they fill it, grows it (doubling, up to limit).
func (b *Reader) makeRoom(limit int) {
	if b.buf == nil || b.w < len(b.buf) {
		return
	}
	if b.r > 0 {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
		return
	}
	b.growTo(min(2*len(b.buf), limit))
}

// HasHead reports whether a whole head is buffered, so that ReadHead with
// the same skipEmpty will not read from the connection.
func (b *Reader) HasHead(skipEmpty bool) bool {
	if skipEmpty {
		b.skipEmptyLines()
	}
	return b.headEnd() > 0
}

// skipEmptyLines consumes the empty lines at the front of the buffer.
func (b *Reader) skipEmptyLines() {
	for b.r < b.w && (b.buf[b.r] == '\n' || (b.buf[b.r] == '\r' && b.r+1 < b.w && b.buf[b.r+1] == '\n')) {
		if b.buf[b.r] == '\r' {
			b.r++
		}
		b.r++
		b.scan, b.head = 0, 0
	}
}

func (b *Reader) tooLarge(max int) error {
	if n := b.w - b.r; n > 0 {
		for _, c := range b.buf[b.r:min(b.w, b.r+max)] {
			if c == '\n' {
				return ErrHeadTooLarge
			}
		}
	}
	return ErrURITooLong
}

// headEnd returns the length of the head at b.r including its final empty
// line, or 0 when the buffer does not hold a complete head yet.
func (b *Reader) headEnd() int {
	if b.head > 0 {
		return b.head
	}
	buf := b.buf[b.r:b.w]
	i := b.scan
	for {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			b.scan = len(buf)
			return 0
		}
		p := i + j // an LF; the head ends if the next line is empty
		switch {
		case p+1 >= len(buf):
			b.scan = p
			return 0
		case buf[p+1] == '\n':
			b.head = p + 2
			return b.head
		case buf[p+1] == '\r':
			if p+2 >= len(buf) {
				b.scan = p
				return 0
			}
			if buf[p+2] == '\n' {
				b.head = p + 3
				return b.head
			}
		}
		i = p + 1
	}
}

// Buffers come in a few size classes, pooled as pointers so that putting one
// back does not allocate. Reads take buffers of minBuf or more; the classes
// below it hold the start of a head while its connection waits for the rest
// (Stash).
const (
	minBuf   = 4 << 10
	minStash = 256
)

// bufPools holds 256 B to 2 KiB (stashes), and 4 to 64 KiB (read buffers);
// larger sizes are not pooled.
var bufPools [9]sync.Pool

// bufClass returns the class of the smallest pooled size of at least n.
func bufClass(n int) int {
	if n <= minStash {
		return 0
	}
	return bits.Len(uint(n-1)) - bits.Len(minStash-1)
}

func getBuf(n int) *[]byte {
	c := bufClass(n)
	if c >= len(bufPools) {
		b := make([]byte, n)
		return &b
	}
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		return p
	}
	b := make([]byte, minStash<<c)
	return &b
}

func putBuf(p *[]byte) {
	c := bufClass(len(*p))
	if c < len(bufPools) && len(*p) == minStash<<c {
		bufPools[c].Put(p)
	}
}
