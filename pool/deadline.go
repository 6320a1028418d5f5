package pool

import (
	"sync/atomic"
	"time"
)

// readDeadline is what a Conn knows of its read deadline: the one
// ReadDeadlineWithin set, in Unix ns, or 0 when another was set since (or
// none was). Setting a deadline costs a timer's update in Go's poller on
// every request; ReadDeadlineWithin skips it while the one set last still
// falls in the window asked for.
type readDeadline struct{ by atomic.Int64 }

// SetReadDeadline is the connection's, and forgets what ReadDeadlineWithin
// set. It may be called from another goroutine (a drain cutting a wait).
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rd.by.Store(0)
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline is the connection's, and forgets what ReadDeadlineWithin
// set.
func (c *Conn) SetDeadline(t time.Time) error {
	c.rd.by.Store(0)
	return c.Conn.SetDeadline(t)
}

// ReadDeadlineWithin makes the read deadline fall between by and
// by+slack: it sets by+slack, unless the deadline it set last (and
// nothing has changed since) is in that window already. A wait it bounds
// may so last up to slack longer than asked: the price of not updating a
// timer for each of the requests a connection carries in that time.
func (c *Conn) ReadDeadlineWithin(by time.Time, slack time.Duration) {
	lo := by.UnixNano()
	if at := c.rd.by.Load(); at >= lo && at <= lo+int64(slack) {
		return
	}
	d := by.Add(slack)
	c.Conn.SetReadDeadline(d)
	c.rd.by.Store(d.UnixNano())
}
