//go:build unix

package sock

import (
	"io"
	"syscall"
	"testing"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// Peek tells an empty socket (EAGAIN), one with bytes waiting (their
// count, the bytes left for the next read) and one whose peer closed it
// (0), and never waits.
func TestPeek(t *testing.T) {
	c, peer := pair(t)
	_, fd, ok := Raw(c)
	if !ok {
		t.Fatal("no descriptor")
	}
	var b [4]byte
	if n, err := Peek(fd, b[:]); err != syscall.EAGAIN {
		t.Fatalf("Peek of an empty socket = %d, %v; want EAGAIN", n, err)
	}
	if _, err := peer.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the peer's bytes", func() bool { n, _ := Peek(fd, b[:]); return n == 2 })
	if string(b[:2]) != "ab" {
		t.Fatalf("Peek saw %q, want \"ab\"", b[:2])
	}
	got := make([]byte, 2)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ab" {
		t.Fatalf("the read after Peek got %q, %v; want \"ab\"", got, err)
	}
	peer.Close()
	wait.For(t, "the peer's close", func() bool { n, err := Peek(fd, b[:]); return n == 0 && err == nil })
}
