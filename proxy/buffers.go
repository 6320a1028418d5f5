package proxy

import "sync"

// Write buffers and replay buffers are borrowed per request and given back
// when a connection goes idle, so that an idle client connection holds no
// buffer (thousands of idle keep-alive clients must cost little memory).
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// maxPooledBuf keeps unusually large buffers out of the pool.
const maxPooledBuf = 256 << 10

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(p *[]byte) {
	if cap(*p) <= maxPooledBuf {
		*p = (*p)[:0]
		bufPool.Put(p)
	}
}

// borrow makes sure the connection has its write buffer.
func (c *conn) borrow() {
	if c.wbufp == nil {
		c.wbufp = getBuf()
		c.wbuf = (*c.wbufp)[:0]
	}
}

// giveBack returns the connection's buffers and Session while it waits
// for a request.
func (c *conn) giveBack() {
	if c.wbufp != nil {
		*c.wbufp = c.wbuf[:0]
		putBuf(c.wbufp)
		c.wbufp, c.wbuf = nil, nil
	}
	c.release()
}
