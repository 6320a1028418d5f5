//go:build !linux

package upstreamtest

// Sent reports false at once: without Linux's SIOCOUTQ, what the peer has
// acknowledged cannot be read.
func (c *Conn) Sent() bool { return false }
