package quicshare

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// socketPair returns the two ends of a new relay: a SOCK_SEQPACKET pair,
// whose messages keep their bounds and whose reader sees the end when
// the other side is closed.
func socketPair() (*net.UnixConn, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("quicshare: relay: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "quicshare relay")
	defer f.Close()
	give := os.NewFile(uintptr(fds[1]), "quicshare relay")
	c, err := net.FileConn(f) // a copy of the descriptor
	if err != nil {
		give.Close()
		return nil, nil, fmt.Errorf("quicshare: relay: %w", err)
	}
	return c.(*net.UnixConn), give, nil
}

// FromFile returns the new process's side of a relay, handed over as f
// (which it closes).
func FromFile(f *os.File) (*net.UnixConn, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("quicshare: relay: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("quicshare: relay: not a Unix socket")
	}
	return uc, nil
}
