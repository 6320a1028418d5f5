// Package park holds network connections that wait without a goroutine
// each: an idle keep-alive client, a client sending its request head a
// byte at a time, a TLS handshake whose ClientHello has not come whole,
// an idle HTTP/2 connection, a connection lingering as it closes. Ten
// thousand of them then cost their own small structures, not ten
// thousand goroutine stacks.
//
// A connection whose goroutine has waited a while (the proxy's parkAfter)
// is handed to the Parker with its socket and a deadline, and its
// goroutine ends. The Parker watches every parked socket in one epoll set
// (Linux; elsewhere Supported is false and New returns nil) and, on its
// one goroutine, calls the connection back: Wake when its socket has
// bytes or was closed, Expire when its deadline passed first. What a
// connection does then (start a goroutine for it again, answer 408,
// close it, read and throw away what a lingering client sends) is the
// connection's own business: the Parker is the mechanism, not the policy.
package park

import "time"

// Conn is a connection a Parker can hold. Its methods are called on the
// Parker's goroutine, one at a time, for a connection no longer parked;
// they must not block, and may park it again.
type Conn interface {
	comparable
	// Parked returns the Parker's record of the connection, which the
	// connection keeps for it (its zero value is ready).
	Parked() *Slot
	// Wake is told that the connection's socket has bytes or was closed.
	// scratch is a buffer of the Parker's goroutine, for bytes to throw
	// away. It reports whether it started a goroutine, so that a burst of
	// wakes lets those goroutines run now and then.
	Wake(scratch []byte) (started bool)
	// Expire is told that the connection's deadline passed first. It
	// reports false when it cannot act yet (for want of a free slot to
	// answer in, say): the Parker calls it again shortly, without
	// watching the socket meanwhile.
	Expire() (handled bool)
	// Close ends a connection the Parker gives up on as it stops.
	Close()
}

// Slot is the Parker's record of a connection, kept in the connection.
type Slot struct {
	fd       int
	id       uint64
	armed    bool // registered in the epoll set (one-shot; re-armed with MOD)
	deadline time.Time
	index    int // in the deadline heap
}

// Deadline returns the deadline the connection was last parked with.
func (s *Slot) Deadline() time.Time { return s.deadline }
