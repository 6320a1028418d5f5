// Package proxytest serves a proxy.Server on a loopback port for tests and
// sends it raw HTTP/1.1 requests, read back with net/http's parser (an
// independent one; never used by the proxy itself).
package proxytest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/proxy"
)

// Serve runs srv on 127.0.0.1:0 until the test ends, then shuts it down,
// and returns its address.
func Serve(t testing.TB, srv *proxy.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String()
}

// Do sends one raw request on a new connection to addr and returns the
// response with its whole body.
func Do(t testing.TB, addr, request string) (*http.Response, string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// Get sends "GET path" with the extra header lines (each ending in CRLF)
// and returns the status and body.
func Get(t testing.TB, addr, path, extra string) (int, string) {
	t.Helper()
	resp, body := Do(t, addr, "GET "+path+" HTTP/1.1\r\nHost: test\r\n"+extra+"\r\n")
	return resp.StatusCode, body
}

// Sticky checks that requests hashed on the header named name stick to one
// upstream each and spread over more than one: it sends four GETs for each
// of 20 values, to upstreams that answer with their own name as the body.
func Sticky(t testing.TB, addr, name string) {
	t.Helper()
	spread := map[string]bool{}
	for u := 0; u < 20; u++ {
		line := fmt.Sprintf("%s: user-%d\r\n", name, u)
		_, first := Get(t, addr, "/", line)
		spread[first] = true
		for i := 0; i < 3; i++ {
			if _, body := Get(t, addr, "/", line); body != first {
				t.Fatalf("user %d went to %s, then %s", u, first, body)
			}
		}
	}
	if len(spread) < 2 {
		t.Fatalf("20 users all hashed to %v", spread)
	}
}
