package pool

// Send writes req, a whole request, and then waits for the upstream to
// begin its answer: when Send returns, a read of the connection finds the
// first bytes of the response (or the close, reset or expired read
// deadline that ended the wait). The connection's read deadline bounds the
// wait, its write deadline any part of the write that has to wait. Send
// returns how much of req was written and the write's error.
//
// Send does the work of Write followed by the first Read with one system
// call fewer: a read right after a request is sent almost never finds the
// answer yet, and its EAGAIN, which costs as much as a read that finds
// one, is skipped. It waits for the poller's report instead, which is safe
// because the report is armed before the request leaves: no answer can
// come in between unseen.
func (c *Conn) Send(req []byte) (int, error) {
	n, tried, err := c.sys.send(req)
	if !tried {
		return c.Conn.Write(req)
	}
	if err == nil && n < len(req) {
		// The socket took part of it: the rest waits for room.
		var m int
		m, err = c.Conn.Write(req[n:])
		n += m
	}
	return n, err
}
