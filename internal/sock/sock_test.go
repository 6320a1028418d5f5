package sock

import (
	"net"
	"testing"
)

func TestRaw(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
