//go:build !unix

package proxy

import "net"

// readiness is a no-op where the socket cannot be peeked: the read that
// follows waits, holding its buffer.
type readiness struct{}

func (w *readiness) init(net.Conn) {}
func (w *readiness) wait() error   { return nil }
