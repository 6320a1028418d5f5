//go:build !linux

package proxy

import "net"

// spare holds no descriptor here: the accept loop backs off when it runs
// out, as net/http's does.
type spare struct{}

func holdSpare() *spare                                                       { return nil }
func (*spare) hold()                                                          {}
func (*spare) release()                                                       {}
func (srv *Server) shed(net.Listener, *spare, []byte, error, *logSampler) int { return 0 }
