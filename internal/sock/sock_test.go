package sock

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestRaw(t *testing.T) {
	w, _ := pair(t)
	c, _ := TCP(w)
	if rc, fd, ok := Raw(c); !ok || rc == nil || fd < 0 {
		t.Fatalf("Raw(TCP connection) = %v, %d, %v", rc, fd, ok)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, fd, ok := Raw(a); ok || fd != -1 {
		t.Fatalf("Raw(net.Pipe) = %d, %v; want -1, false", fd, ok)
	}
	c.Close()
	if _, _, ok := Raw(c); ok {
		t.Fatal("Raw(closed connection) reported a socket")
	}
}

func TestDial(t *testing.T) {
	dir, err := os.MkdirTemp("", "sk")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.sock")
	uln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tln.Close()
	for _, tt := range []struct {
		addr, network string
	}{
		{"unix:" + path, "unix"},
		{tln.Addr().String(), "tcp"},
	} {
		var d net.Dialer
		c, err := Dial(context.Background(), &d, tt.addr)
		if err != nil {
			t.Fatalf("Dial(%q): %v", tt.addr, err)
		}
		if got := c.RemoteAddr().Network(); got != tt.network {
			t.Errorf("Dial(%q) reached a %s socket, want %s", tt.addr, got, tt.network)
		}
		if _, _, ok := Raw(c); !ok {
			t.Errorf("Raw(%s connection) found no socket", tt.network)
		}
		c.Close()
	}
	var d net.Dialer
	if _, err := Dial(context.Background(), &d, "unix:"+filepath.Join(dir, "none.sock")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Dial of a missing socket: %v, want ENOENT", err)
	}
	for addr, want := range map[string]string{"unix:/a/b": "/a/b", "unix:": "", "127.0.0.1:80": "", "unixhost:80": ""} {
		path, ok := UnixPath(addr)
		if path != want || ok != strings.HasPrefix(addr, "unix:") {
			t.Errorf("UnixPath(%q) = %q, %v", addr, path, ok)
		}
	}
}
