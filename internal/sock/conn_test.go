package sock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// pair returns the two ends of a TCP connection on 127.0.0.1, the dialed
// one wrapped.
func pair(t *testing.T) (net.Conn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	w := Wrap(c)
	t.Cleanup(func() { w.Close(); s.Close() })
	return w, s.(*net.TCPConn)
}

func TestWrap(t *testing.T) {
	w, _ := pair(t)
	if _, same := w.(*net.TCPConn); same && runtime.GOOS == "linux" {
		t.Fatal("Wrap(TCP connection) returned it unwrapped")
	}
	if tc, ok := TCP(w); !ok || tc == nil {
		t.Fatalf("TCP(Wrap(TCP connection)) = %v, %v", tc, ok)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Fatalf("Wrap(net.Pipe) = %T, want it unchanged", got)
	}
	if _, ok := TCP(a); ok {
		t.Fatal("TCP(net.Pipe) reported a TCP connection")
	}
}

// A write larger than both sockets' buffers waits for the peer to read,
// and a read returns what came, then io.EOF.
func TestConnReadWrite(t *testing.T) {
	w, peer := pair(t)
	out := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	if n, err := w.Write(out); n != len(out) || err != nil {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(out))
	}
	w.(interface{ CloseWrite() error }).CloseWrite()
	if b := <-got; !bytes.Equal(b, out) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(b), len(out))
	}
	go func() {
		peer.Write([]byte("answer"))
		peer.CloseWrite()
	}()
	b, err := io.ReadAll(w)
	if string(b) != "answer" || err != nil {
		t.Fatalf("ReadAll = %q, %v", b, err)
	}
	if n, err := w.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read at the end = %d, %v; want 0, io.EOF", n, err)
	}
	if n, err := w.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v; want 0, nil", n, err)
	}
}

// A read and a write may run at once (the race detector watches).
func TestConnReadWhileWriting(t *testing.T) {
	w, peer := pair(t)
	const n = 1 << 20
	echoed := make(chan error, 1)
	go func() {
		_, err := io.CopyN(peer, peer, n)
		echoed <- err
	}()
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(w, make([]byte, n))
		read <- err
	}()
	if _, err := w.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
}

// Errors are what a *net.TCPConn returns: a deadline's, a closed
// connection's and a reset's, each in a *net.OpError.
func TestConnErrors(t *testing.T) {
	w, peer := pair(t)
	w.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := w.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline: %v, want a timeout", err)
	}
	w.SetReadDeadline(time.Time{})

	peer.SetLinger(0)
	peer.Close()
	_, err = w.Read(make([]byte, 8))
	var oe *net.OpError
	if !errors.Is(err, syscall.ECONNRESET) || !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("Read of a reset connection: %v, want ECONNRESET in a read OpError", err)
	}

	w.Close()
	if _, err := w.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
	if _, err := w.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
}

// Neither Read nor Write allocates.
func TestConnAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	w, peer := pair(t)
	p, q := []byte("ping"), make([]byte, 4)
	allocs := testing.AllocsPerRun(200, func() {
		w.Write(p)
		io.ReadFull(peer, q)
		peer.Write(q)
		io.ReadFull(w, q)
	})
	// io.ReadFull on peer, a *net.TCPConn, allocates nothing either.
	if allocs != 0 {
		t.Fatalf("%.1f allocations per write and read, want 0", allocs)
	}
}
