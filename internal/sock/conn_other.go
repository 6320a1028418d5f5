//go:build !linux

package sock

import "net"

// Wrap returns nc: only on Linux are a socket's system calls made unseen
// by the scheduler (see Read).
func Wrap(nc net.Conn) net.Conn { return nc }

// TCP returns the TCP connection nc is.
func TCP(nc net.Conn) (*net.TCPConn, bool) {
	tc, ok := nc.(*net.TCPConn)
	return tc, ok
}
