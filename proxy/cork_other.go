//go:build !linux

package proxy

import "net"

// cork does nothing here: the head goes in a packet of its own.
func cork(*net.TCPConn, bool) bool { return false }
