package sock

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// With a write timeout, a write to a peer that stops reading fails with a
// deadline error once it has waited that long for room; a write that had
// to wait and then went through leaves no deadline behind.
func TestConnWriteTimeout(t *testing.T) {
	w, peer := pair(t)
	c := w.(*Conn)
	const d = 10 * time.Second // never reached while the peer reads
	c.SetWriteTimeout(d)

	big := make([]byte, 16<<20) // past both sockets' buffers
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(peer, make([]byte, len(big)))
		read <- err
	}()
	if n, err := c.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write to a reading peer = %d, %v; want %d, nil", n, err, len(big))
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if c.wto != d {
		t.Fatalf("after a write that waited, the timeout is %v, want %v: its deadline was not cleared", c.wto, d)
	}

	// Now the peer reads nothing: writes go on until the sockets' buffers
	// (autotuned, up to tens of MiB) are full and the wait times out.
	c.SetWriteTimeout(50 * time.Millisecond)
	var err error
	for i := 0; i < 64 && err == nil; i++ {
		_, err = c.Write(big)
	}
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Write to a peer that does not read: %v; want a timeout", err)
	}
}
