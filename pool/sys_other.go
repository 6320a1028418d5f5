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
