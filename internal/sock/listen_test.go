//go:build unix

package sock

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// shortDir returns a new directory under os.TempDir(), removed when the
// test ends: t.TempDir()'s paths can pass the 107 bytes a Unix socket's
// path may have.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ux")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestListenUnix(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "s.sock")

	ln, err := ListenUnix(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&fs.ModeSocket == 0 || fi.Mode().Perm() != DefaultUnixMode {
		t.Fatalf("socket file %v, %v; want a socket of mode %v", fi.Mode(), err, DefaultUnixMode)
	}
	// A live server's socket is not taken from it.
	if _, err := ListenUnix(path, 0); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listening on a live server's socket: %v, want EADDRINUSE", err)
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Fatalf("the live server's socket was broken: %v", err)
	} else {
		c.Close()
	}
	// Closed, it removes its file.
	ln.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the socket file outlives the listener: %v", err)
	}

	// A socket left by a process that crashed: a file nothing listens on.
	crashed, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	crashed.SetUnlinkOnClose(false)
	crashed.Close()
	ln, err = ListenUnix(path, 0o600)
	if err != nil {
		t.Fatalf("listening where a stale socket is: %v", err)
	}
	defer ln.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	// A file that is not a socket stays.
	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(file, 0); !errors.Is(err, ErrNotSocket) {
		t.Fatalf("listening on a plain file: %v, want ErrNotSocket", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "data" {
		t.Fatalf("the plain file was touched: %q, %v", b, err)
	}
}
