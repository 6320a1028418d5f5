package upstreamtest

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
)

// Canned starts an upstream on 127.0.0.1 that answers every request head,
// followed by bodyLen bytes of body, with response, reading and writing
// with buffers made once per connection: it allocates nothing per request,
// so that a benchmark can count the proxy's allocations alone. With cfg it
// speaks TLS. Unlike a Server it parses nothing and records nothing. Its
// listener, connections and goroutines end when the test does (tb.Cleanup
// waits for them). It returns the address.
func Canned(tb testing.TB, response []byte, bodyLen int, cfg *tls.Config) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	var acc acceptor
	acc.start(ln, func(nc net.Conn, _ int) { answerCanned(nc, response, bodyLen) }, nil)
	tb.Cleanup(acc.close)
	return addr
}

// answerCanned answers each request head and body read from nc with
// response, until nc fails.
func answerCanned(nc net.Conn, response []byte, bodyLen int) {
	buf := make([]byte, 64<<10)
	n := 0
	for {
		m, err := nc.Read(buf[n:])
		if err != nil {
			return
		}
		n += m
		for {
			i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
			if i < 0 || n < i+4+bodyLen {
				break
			}
			if _, err := nc.Write(response); err != nil {
				return
			}
			n = copy(buf, buf[i+4+bodyLen:n])
		}
	}
}
