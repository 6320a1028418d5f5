//go:build !linux

package proxy

// awaitHello has no parker to wait in here: the handshake waits for the
// ClientHello with its goroutine.
func (c *conn) awaitHello() next { return readHead }
