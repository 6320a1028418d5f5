package proxy

import "syscall"

// deferAccept asks the kernel to complete accept(2) only once the client
// has sent bytes (or after about a second without any). An HTTP client
// always speaks first, so the first read on an accepted connection then
// finds its request instead of coming back empty and waiting in the poller:
// one system call and one goroutine park fewer per new connection. A client
// that connects and sends nothing costs the kernel's queue, not a goroutine.
func deferAccept(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
