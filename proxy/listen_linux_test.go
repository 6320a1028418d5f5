package proxy

import (
	"net"
	"syscall"
	"testing"
)

func TestListenDefersAccept(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	rc.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT)
	})
	if gerr != nil || v == 0 {
		t.Fatalf("TCP_DEFER_ACCEPT = %d, %v; want it set", v, gerr)
	}
	// A client that speaks is accepted and served as usual.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x"))
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
}
