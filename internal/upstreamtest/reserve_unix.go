//go:build unix

package upstreamtest

import (
	"fmt"
	"net"
	"syscall"
)

// reserve binds a TCP socket to a port of 127.0.0.1 and never listens on
// it: the kernel refuses connections to the port (RST), and no other
// socket can bind it while this one is open.
func reserve() (addr string, release func(), err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return "", nil, fmt.Errorf("reserve a port: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("reserve a port: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("reserve a port: %w", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("reserve a port: bound to %T", sa)
	}
	addr = net.JoinHostPort("127.0.0.1", fmt.Sprint(in4.Port))
	return addr, func() { syscall.Close(fd) }, nil
}
