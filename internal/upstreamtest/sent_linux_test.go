package upstreamtest_test

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestSent: Sent returns once the peer has every byte written, so that a
// Reset after it loses none of them. The client's receive buffer is 4 KiB
// and it reads nothing until the handler's Write has returned: the bytes
// then wait in the server's send buffer, which a Reset would discard.
func TestSent(t *testing.T) {
	const size = 256 << 10
	wrote, sent := make(chan struct{}), make(chan bool, 1)
	s := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Write(make([]byte, size))
		close(wrote)
		sent <- c.Sent()
		c.Reset()
	})
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return err
	}}
	nc, err := d.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	send(t, nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-wrote
	if n, err := io.Copy(io.Discard, nc); n != size || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read %d bytes, then %v; want %d, then a reset", n, err, size)
	}
	if !<-sent {
		t.Fatal("Sent reported false")
	}
}
