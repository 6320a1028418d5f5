//go:build !unix

package upstreamtest

import "net"

// reserve returns a port that was free a moment ago: without a socket that
// binds and never listens, the port is only unlikely to be taken again.
func reserve() (addr string, release func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = ln.Addr().String()
	ln.Close()
	return addr, func() {}, nil
}
