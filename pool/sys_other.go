//go:build !unix

package pool

import "net"

// sysConn cannot peek on this platform; the retry of a stale-connection
// failure covers what the check would have caught.
type sysConn struct{ fd int }

func (s *sysConn) init(net.Conn) { s.fd = -1 }
func (s *sysConn) alive() bool   { return true }

// send leaves the whole of req to Write.
func (s *sysConn) send(req []byte) (int, bool, error) { return 0, false, nil }

// readNow cannot read without waiting here.
func (s *sysConn) readNow([]byte) (int, error) { return 0, ErrNothingYet }

// readIdle cannot either: an idle TLS connection's check finds nothing,
// as alive does.
func (s *sysConn) readIdle([]byte) (int, error) { return 0, errWouldBlock }

// writeIdle writes p the ordinary way, waiting as crypto/tls lets it for
// a close_notify (up to 5 s).
func (s *sysConn) writeIdle(p []byte, c net.Conn) (int, error) { return c.Write(p) }
