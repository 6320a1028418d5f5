package proxy

import (
	"bytes"

	"github.com/sluice-proxy/sluice/internal/clock"
	"github.com/sluice-proxy/sluice/proxy/internal/ready"
)

// awaitHello waits for the first TLS record of a new connection, its
// ClientHello, to come whole, within the header timeout counted from
// accept (c.helloBy), and returns readHead for the handshake to begin,
// parked, or closeIt when Shutdown has begun. It reads what comes into
// c.early, which the handshake then reads first (helloConn). While the
// record is not whole, its bytes so far wait in a buffer of their size, and
// after parkAfter without the rest the connection parks without its
// goroutine until more bytes come, or until the timeout, when the parker
// closes it and counts it (FailedTimeout). A client that connects and
// sends nothing, or part of a ClientHello, then costs its small structures
// while it waits (about 1.5 KB, against 9 KB with a goroutine in the
// handshake): the handshake cannot park itself, since a read that times
// out inside it ends it for good, and crypto/tls is not asked for its
// Conn until the handshake begins. A client that stops after its
// ClientHello still holds a goroutine until the timeout.
//
// When accept waited for the client's first bytes (TCP_DEFER_ACCEPT) and
// the ClientHello fits a segment, it is whole at the first read, which
// crypto/tls would have made anyway. What is not a TLS handshake record,
// and a record longer than a read buffer (4 KiB), go to the handshake at
// once, which answers or refuses them.
func (c *conn) awaitHello() next {
	srv := c.srv
	if srv.parker == nil || !c.ready.Raw() || c.tls != nil {
		return readHead // the handshake waits, with the goroutine
	}
	now := clock.Now()
	if c.helloBy.IsZero() {
		c.helloBy = now.Add(srv.headerTimeout())
	}
	parkAt := now.Add(parkAfter)
	for now.Before(c.helloBy) {
		// The deadline of the last wait may have passed since (a parked
		// connection's has): reads fail at once past it.
		// (nc is the socket itself until the handshake begins.)
		c.setReadDeadline(c.helloBy)
		if whole, err := c.readHello(); whole || err != nil {
			return readHead // the handshake reads it, or meets the error and counts it
		}
		// Marked idle, so that Shutdown ends the wait: no request has
		// begun.
		if !c.idleUntil(minTime(c.helloBy, parkAt)) {
			return closeIt
		}
		err := c.ready.Readable()
		c.setIdle(false)
		now = clock.Now()
		switch {
		case err == nil:
			parkAt = now.Add(parkAfter) // from the last byte
			continue
		case srv.Draining():
			return closeIt
		case !isTimeout(err):
			return readHead
		case now.Before(c.helloBy) && c.park(c.helloBy):
			return parked
		}
		parkAt = c.helloBy // could not park: wait on with the goroutine
	}
	return readHead // past the timeout: the handshake fails at once, counted
}

// readHello reads what the socket holds into c.early, never waiting, and
// reports whether the handshake may begin: c.early holds a whole first
// record, or something that is not a TLS handshake record, or fills a read
// buffer. Until then c.early is a buffer of its bytes' size; once whole it
// is a pooled read buffer (c.earlyp), which goes back to the pool when the
// handshake has read it.
func (c *conn) readHello() (bool, error) {
	bp := getBuf()
	buf := append((*bp)[:0], c.early...)
	var err error
	for len(buf) < cap(buf) && !helloWhole(buf) {
		n, rerr := c.ready.Discard().Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if rerr != nil {
			if rerr != ready.ErrWouldBlock {
				err = rerr
			}
			break
		}
	}
	if helloWhole(buf) || len(buf) == cap(buf) || err != nil {
		c.early, c.earlyp = buf, bp
		return true, err
	}
	c.early = bytes.Clone(buf)
	putBuf(bp)
	return false, nil
}

// helloWhole reports whether b, the first bytes of a connection, hold its
// first TLS record whole, or are not a TLS handshake record.
func helloWhole(b []byte) bool {
	switch {
	case len(b) == 0:
		return false
	case b[0] != tlsHandshakeRecord:
		return true
	case len(b) < 5:
		return false
	}
	return len(b) >= 5+(int(b[3])<<8|int(b[4]))
}
