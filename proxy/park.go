package proxy

import (
	"os"
	"time"

	"github.com/sluice-proxy/sluice/proxy/internal/park"
	"github.com/sluice-proxy/sluice/proxy/internal/ready"
)

// Client connections that wait without a goroutine (package park holds
// them; this file says what becomes of them):
//
//   - idle ones: a connection that has waited parkAfter for its next
//     request parks until bytes (or the client's close) arrive, when it
//     gets a goroutine again, or until its idle timeout, when it is
//     closed;
//   - slow heads: one that has waited parkAfter for the next bytes of a
//     head it has begun parks the same way with the bytes so far stashed,
//     until the header timeout, when it gets a goroutine again to answer
//     408 (at most maxAnswering at a time, so that a thousand heads timing
//     out together do not take a thousand goroutine stacks at once);
//   - TLS handshakes whose ClientHello has not come whole: one waits
//     parked after parkAfter until more of it comes, or until the header
//     timeout, when it is closed (conn.awaitHello);
//   - idle HTTP/2 connections, whose engine returned h2.ErrIdle (see
//     conn.runH2): they resume on bytes, the client's close, their idle
//     timeout (for the engine's GOAWAY) and Shutdown;
//   - lingering ones: a connection answered and closing, whose client may
//     still be sending, is read and its bytes thrown away while parked
//     until the client closes, lingerBytes came or lingerTime passed
//     (conn.close does the same with a goroutine).
//
// Ten thousand idle keep-alive clients, or slow ones sending their heads a
// byte at a time, then cost their small structures, not ten thousand
// goroutine stacks. Busy connections never park.

// parker holds the server's waiting client connections; nil where there
// is none (the system has no epoll set), and then they keep their
// goroutine.
type parker = park.Parker[*conn]

// parkAfter is how long a connection waits with its goroutine before it
// parks: long enough that a client sending request after request never
// pays for parking, short enough that idle ones park soon.
const parkAfter = 200 * time.Millisecond

// maxAnswering bounds the goroutines answering 408 to parked heads at once.
const maxAnswering = 64

// park hands c, whose goroutine is about to end, to the parker until
// bytes arrive or deadline passes. It reports false when c cannot be
// parked (the caller then keeps waiting with its goroutine).
func (c *conn) park(deadline time.Time) bool {
	p := c.srv.parker
	return p != nil && p.Park(c, c.ready.FD(), deadline)
}

// Parked is the parker's record of c (park.Conn).
func (c *conn) Parked() *park.Slot { return &c.slot }

// Wake resumes a parked connection whose client sent bytes or closed: a
// goroutine serves it again, or a lingering one reads what came.
func (c *conn) Wake(scratch []byte) bool {
	if c.lingerLeft > 0 {
		c.drainLinger(scratch)
		return false
	}
	c.srv.start(c)
	return true
}

// Expire acts on a parked connection whose deadline passed first.
func (c *conn) Expire() bool {
	switch {
	case c.h2.Load() != nil:
		// Its engine ends it, with a GOAWAY.
		c.srv.start(c)
	case c.state == nil && !c.helloBy.IsZero() && c.lingerLeft == 0:
		// A ClientHello not whole in time (conn.awaitHello): counted as
		// the handshake's timeout, and closed.
		c.handshakeFailed(os.ErrDeadlineExceeded)
		c.Close()
	case c.lingerLeft == 0 && !c.headBy.IsZero():
		// A head begun and not finished in time: a goroutine answers 408
		// (conn.awaitHead), once a slot is free.
		select {
		case c.srv.answering <- struct{}{}:
		default:
			return false
		}
		c.answerSlot = true
		c.srv.start(c)
	default:
		// Idle too long, closed without a word, as a waiting goroutine
		// would have; or done lingering.
		c.Close()
	}
	return true
}

// answered gives back the slot of a goroutine that was started to answer
// an expired head.
func (srv *Server) answered() { <-srv.answering }

// Close closes a connection the parker held (park.Conn).
func (c *conn) Close() {
	switch {
	case c.lingerLeft > 0:
		c.nc.Close() // its buffers went back when it began lingering
	case c.tls != nil && c.state != nil:
		// Closing TLS writes a close_notify, which waits (up to 5 s,
		// crypto/tls's bound) when the client's window is full: not on
		// the parker's goroutine, which every parked connection waits on.
		go func() {
			c.close()
			c.srv.forget(c)
		}()
		return
	default:
		c.close()
	}
	c.srv.forget(c)
}

// lingerParked has the parker hold c, answered and closing, for its
// lingering read (see conn.close): its buffers go back, its sending side
// closes, and what the client still sends is read and thrown away until it
// closes. It reports false when c cannot be parked; the caller then closes
// c itself.
func (c *conn) lingerParked() bool {
	p := c.srv.parker
	sc := c.socket()
	if p == nil || sc == nil {
		return false
	}
	c.r.Discard(c.r.Buffered())
	c.r.Release()
	c.giveBack()
	if c.tls != nil {
		// close_notify, when the handshake was done; the lingering reads
		// take the socket's bytes past TLS.
		c.tls.CloseWrite()
	}
	sc.CloseWrite()
	// The parker keeps the deadline: the socket's own, passed already
	// when a head timed out, would fail the lingering reads at once, and
	// the close would reset what the client still sends.
	sc.SetReadDeadline(time.Time{})
	c.lingerLeft = lingerBytes
	return p.Park(c, c.ready.FD(), time.Now().Add(lingerTime))
}

// drainLinger reads what a lingering connection's client sent and throws
// it away, then parks it again, or closes it at the client's end or past
// lingerBytes.
func (c *conn) drainLinger(scratch []byte) {
	r := c.ready.Discard()
	for {
		n, err := r.Read(scratch)
		c.lingerLeft -= n
		switch {
		case err == ready.ErrWouldBlock && c.lingerLeft > 0:
			if !c.park(c.slot.Deadline()) {
				c.Close()
			}
			return
		case err != nil || c.lingerLeft <= 0:
			c.Close() // closed, reset, or enough
			return
		}
	}
}

// closeParked stops the parker, for Shutdown: every connection it held is
// closed, but HTTP/2 ones, which resume for their GOAWAY.
func (srv *Server) closeParked() {
	if srv.parker == nil {
		return
	}
	for _, c := range srv.parker.Close() {
		if c.h2.Load() != nil {
			// Its engine, told of the shutdown, says GOAWAY to its client
			// before it ends.
			srv.start(c)
			continue
		}
		c.Close()
	}
}
