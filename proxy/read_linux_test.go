package proxy

import (
	"crypto/tls"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// waitRead waits until the proxy has read every byte the client
// connection nc sent it: all are in the proxy's socket (delivered), and
// that holds none unread (SIOCINQ). What the test sends next then comes to
// the proxy in a read of its own, after it has acted on what it got: the
// event a test of a request in pieces waits for.
func (hs *harness) waitRead(t testing.TB, nc net.Conn) {
	t.Helper()
	nc = rawConn(nc)
	wait.For(t, "the proxy to read what the client sent", func() bool {
		sc := hs.serverSide(nc)
		return sc != nil && delivered(nc, sc) && queued(sc, unix.SIOCINQ) == 0
	})
}

// waitDelivered waits until every byte the client connection nc sent is
// in the proxy's socket, read or not.
func (hs *harness) waitDelivered(t testing.TB, nc net.Conn) {
	t.Helper()
	nc = rawConn(nc)
	wait.For(t, "the client's bytes to reach the proxy's socket", func() bool {
		sc := hs.serverSide(nc)
		return sc != nil && delivered(nc, sc)
	})
}

// delivered reports whether the server's end sc of a loopback TCP
// connection has received every byte written to the client's end nc:
// what was written is what the client sent once (sent, less what it sent
// again) and what waits to be sent, and the server counts what it
// received. The client's acknowledgements are not waited for, which a
// delayed ACK holds back for up to 40 ms.
func delivered(nc, sc net.Conn) bool {
	ci, si := tcpInfo(nc), tcpInfo(sc)
	return ci != nil && si != nil && si.Bytes_received == ci.Bytes_sent-ci.Bytes_retrans+uint64(ci.Notsent_bytes)
}

// serverSide returns the proxy's socket for the client connection nc
// (under TLS, the TCP connection), or nil while the proxy holds none.
func (hs *harness) serverSide(nc net.Conn) net.Conn {
	local := nc.LocalAddr().String()
	hs.srv.mu.Lock()
	defer hs.srv.mu.Unlock()
	for c := range hs.srv.conns {
		if c.raw.RemoteAddr().String() == local {
			return c.raw
		}
	}
	return nil
}

// rawConn returns the socket under a TLS connection, or nc.
func rawConn(nc net.Conn) net.Conn {
	if tc, ok := nc.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return nc
}

// control runs f on nc's descriptor, and reports whether it could.
func control(nc net.Conn, f func(fd int)) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return rc.Control(func(fd uintptr) { f(int(fd)) }) == nil
}

// queued returns the bytes in nc's socket that req counts (SIOCINQ: not
// read yet), or -1 when it cannot be read.
func queued(nc net.Conn, req uint) int {
	n := -1
	control(nc, func(fd int) {
		if v, err := unix.IoctlGetInt(fd, req); err == nil {
			n = v
		}
	})
	return n
}

// tcpInfo returns nc's TCP_INFO, or nil when it cannot be read.
func tcpInfo(nc net.Conn) *unix.TCPInfo {
	var info *unix.TCPInfo
	control(nc, func(fd int) {
		info, _ = unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	return info
}
