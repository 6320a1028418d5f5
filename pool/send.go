package pool

import (
	"errors"
	"io"
	"time"

	"github.com/sluice-proxy/sluice/internal/clock"
)

// Send writes req, a whole request, and then waits for the upstream to
// begin its answer: when Send returns, a read of the connection finds the
// first bytes of the response (or the close, reset or expired read
// deadline that ended the wait). The connection's read deadline bounds the
// wait; writeTimeout (0: none) bounds a write that has to wait for room,
// which only a request larger than the socket's free buffer does. Send
// returns how much of req was written and the write's error.
//
// Send does the work of Write followed by the first Read with one system
// call fewer: a read right after a request is sent almost never finds the
// answer yet, and its EAGAIN, which costs as much as a read that finds
// one, is skipped. It waits for the poller's report instead, which is safe
// because the report is armed before the request leaves: no answer can
// come in between unseen.
//
// Over TLS, Send is Write: the request must go through the TLS layer to be
// encrypted, and the wait without a read would end at the first TLS record
// to arrive, which may be a session ticket rather than the answer.
func (c *Conn) Send(req []byte, writeTimeout time.Duration) (int, error) {
	var n int
	if c.tr == nil {
		m, tried, err := c.sys.send(req)
		if tried && (err != nil || m == len(req)) {
			return m, err
		}
		n = m
	}
	// The socket took part of it, or cannot be written to directly: the
	// rest waits for room.
	var deadline time.Time
	if writeTimeout > 0 {
		deadline = clock.Now().Add(writeTimeout)
	}
	c.SetWriteDeadline(deadline)
	m, err := c.Conn.Write(req[n:])
	return n + m, err
}

// ErrNothingYet is what a Now reader returns when the socket holds no bytes.
var ErrNothingYet = errors.New("pool: nothing to read yet")

// Now returns a reader of what the socket holds now: each Read makes one
// read(2) and never waits. ErrNothingYet stands for EAGAIN, and for a
// read the poller refuses (expired deadline, closed connection), which an
// ordinary Read then reports; a reset or an end of stream comes back as
// Read's would. On a connection that is not a socket it reads nothing.
// Over TLS it reads the plaintext of what the TLS layer and the socket
// hold, at most one record's, and never waits either.
func (c *Conn) Now() io.Reader {
	if c.tr != nil {
		return tlsNow{c}
	}
	return nowReader{c}
}

type nowReader struct{ c *Conn }

func (r nowReader) Read(p []byte) (int, error) { return r.c.sys.readNow(p) }
