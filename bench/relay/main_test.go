package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"golang.org/x/net/http2"
)

// The relay carries what bench/compare sends: keep-alive GETs, a POST with
// a body, a large response, and Connection: close.
func TestRelay(t *testing.T) {
	testRelay(t, func(ln net.Listener) net.Listener { return ln }, func(c net.Conn) net.Conn { return c })
}

// Over TLS, as with -cert and -key: TLS 1.3, and the same exchanges.
func TestRelayTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "relay CA")
	leaf := ca.Server(t, "relay.test")
	client := &tls.Config{ServerName: "relay.test", RootCAs: ca.Pool()}
	testRelay(t,
		func(ln net.Listener) net.Listener { return tls.NewListener(ln, serverTLS(*leaf.TLS)) },
		func(c net.Conn) net.Conn {
			tc := tls.Client(c, client)
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			if v := tc.ConnectionState().Version; v != tls.VersionTLS13 {
				t.Fatalf("negotiated %s, want TLS 1.3", tls.VersionName(v))
			}
			return tc
		})
}

func testRelay(t *testing.T, listen func(net.Listener) net.Listener, dial func(net.Conn) net.Conn) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	big := strings.Repeat("y", 1<<20)
	go http.Serve(up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/big":
			// The relay knows only Content-Length framing.
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			io.WriteString(w, big)
		default:
			io.WriteString(w, r.Method+" "+string(body))
		}
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = listen(ln)
	runRelay(t, ln, up.Addr().String())

	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(nc)
	defer c.Close()
	br := bufio.NewReader(c)
	for _, tc := range []struct{ req, want string }{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET "},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", "POST hello"},
		{"GET /big HTTP/1.1\r\nHost: a\r\n\r\n", big},
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "GET "},
	} {
		if _, err := io.WriteString(c, tc.req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.req, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || string(body) != tc.want {
			t.Fatalf("%q: %d bytes %.20q, %v; want %.20q", tc.req, len(body), body, err, tc.want)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after Connection: close the relay kept the connection: %v", err)
	}
}

// Over TLS with ALPN h2: concurrent GETs on one HTTP/2 connection, each
// answered whole through the upstream's kept-alive connections; a request
// with a body, which the relay does not carry, is refused, not hung.
func TestRelayH2(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go http.Serve(up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Host", r.Host)
		io.WriteString(w, r.Method+" "+r.URL.Path)
	}))
	ca := tlstest.NewCA(t, "relay CA")
	leaf := ca.Server(t, "relay.test")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = tls.NewListener(ln, serverTLS(*leaf.TLS))
	runRelay(t, ln, up.Addr().String())

	tr := &http2.Transport{TLSClientConfig: &tls.Config{ServerName: "relay.test", RootCAs: ca.Pool()}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	base := "https://" + ln.Addr().String()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			path := "/n/" + strconv.Itoa(i)
			resp, err := client.Get(base + path)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			switch {
			case err != nil:
				errs <- err
			case resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(body) != "GET "+path:
				errs <- fmt.Errorf("%s: %s %d %q, want HTTP/2 200 %q", path, resp.Proto, resp.StatusCode, body, "GET "+path)
			case resp.Header.Get("X-Host") != ln.Addr().String() || resp.ContentLength != int64(len(body)):
				errs <- fmt.Errorf("%s: X-Host %q, Content-Length %d", path, resp.Header.Get("X-Host"), resp.ContentLength)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The body is opaque to the client, which cannot rewind it: a refused
	// stream ends the request instead of being retried with backoff.
	resp, err := client.Post(base+"/post", "text/plain", io.MultiReader(strings.NewReader("hello")))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a POST with a body: %s, want the stream refused", resp.Status)
	}
}

// runRelay serves ln as main does, relaying to upstream, until the test
// ends; then the listener and the relay's pooled upstream connections
// are closed.
func runRelay(t *testing.T, ln net.Listener, upstream string) {
	r := &relay{upstream: upstream, idle: make(chan *upConn, 8)}
	t.Cleanup(func() {
		ln.Close()
		for len(r.idle) > 0 {
			(<-r.idle).nc.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.accept(c)
		}
	}()
}
