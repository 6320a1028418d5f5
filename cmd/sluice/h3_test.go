//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// h3Config is a config with one TLS listener serving h3, h2 and
// http/1.1; timeout is timeouts.header, which a reload changes to start a
// new server.
func h3Config(t *testing.T, dir, upstream, timeout string) (string, *tlstest.CA) {
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "example.com", "127.0.0.1").Write(t, dir, "site")
	return fmt.Sprintf(`listen:
  - address: 127.0.0.1:0
    tls:
      certificates: [{cert: %s, key: %s}]
    protocols: [h3, h2, http/1.1]
    early_data: safe
timeouts: {header: %s, drain: 5s}
limits:
  h3: {max_concurrent_streams: 50, max_header_list: 32KiB, idle_timeout: 20s}
access_log: {enabled: true}
`+upstreamsOf, cert, key, timeout, upstream), ca
}

// h3Get sends a GET on a new stream of qc and returns the status and body.
func h3Get(qc *quic.Conn, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := qc.OpenStreamSync(ctx)
	if err != nil {
		return 0, "", err
	}
	st.SetDeadline(time.Now().Add(5 * time.Second))
	var block bytes.Buffer
	enc := qpack.NewEncoder(&block)
	for _, f := range []qpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "example.com"}, {Name: ":path", Value: path}} {
		enc.WriteField(f)
	}
	b := quicvarint.Append(quicvarint.Append(nil, 0x01), uint64(block.Len()))
	st.Write(append(b, block.Bytes()...))
	st.Close()
	r := bufio.NewReader(st)
	status, body := 0, ""
	for {
		typ, err := quicvarint.Read(r)
		if err == io.EOF {
			return status, body, nil
		}
		if err != nil {
			return status, body, err
		}
		n, err := quicvarint.Read(r)
		if err != nil {
			return status, body, err
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return status, body, err
		}
		switch typ {
		case 0x00:
			body += string(p)
		case 0x01:
			dec := qpack.NewDecoder().Decode(p)
			for {
				f, err := dec()
				if err != nil {
					break
				}
				if f.Name == ":status" {
					status, _ = strconv.Atoi(f.Value)
				}
			}
		}
	}
}

// TestRunH3: a listener with h3 serves HTTP/3 on UDP at its address and
// port, its TCP answers carry Alt-Svc naming that port, and a client load
// over HTTP/3 across a reload that starts a new server (the UDP socket
// kept, the old connections sent GOAWAY) sees no failed request.
func TestRunH3(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	cfg, ca := h3Config(t, dir, up.Addr(), "10s")
	s := startRunning(t, cfg)
	addr := s.addr(0)
	sock := s.sockets[0]
	if sock.udp == nil || sock.udp.LocalAddr().String() != addr {
		t.Fatalf("HTTP/3 socket %v, want one at %s", sock.udp, addr)
	}
	// The TCP answers advertise HTTP/3.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "example.com"}}}
	resp, err := client.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, port, _ := strings.Cut(addr, ":")
	if got, want := resp.Header.Get("Alt-Svc"), `h3=":`+port+`"; ma=86400`; got != want {
		t.Errorf("Alt-Svc %q, want %q", got, want)
	}

	tlsConf := &tls.Config{RootCAs: ca.Pool(), ServerName: "example.com", NextProtos: []string{"h3"}}
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var qc *quic.Conn
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if qc == nil || qc.Context().Err() != nil {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					c, err := quic.DialAddr(ctx, addr, tlsConf, &quic.Config{})
					cancel()
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
						continue
					}
					qc = c
				}
				status, body, err := h3Get(qc, "/")
				var se *quic.StreamError
				switch {
				case err != nil && asStreamErr(err, &se) && se.ErrorCode == 0x10b:
					// H3_REQUEST_REJECTED: never processed, sent again on
					// a new connection, as a client that honours GOAWAY
					// does.
					qc = nil
					i--
				case err != nil && qc.Context().Err() != nil:
					// Closed by a GOAWAY's end before the request was
					// sent: a client that honours GOAWAY opens a new one.
					qc = nil
					i--
				case err != nil || status != 200 || body != "ok":
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("%d %q %v", status, body, err))
				default:
					ok.Add(1)
				}
			}
		}()
	}
	waitCount := func(n int64) {
		t.Helper()
		if !wait.Until(wait.Timeout, func() bool { return ok.Load() >= n }) {
			t.Fatalf("only %d requests in %v, %d failed: %v\n%s", ok.Load(), wait.Timeout, failed.Load(), firstErr.Load(), s.log.String())
		}
	}
	waitCount(50)
	s.reloadWith(t, strings.Replace(cfg, "header: 10s", "header: 9s", 1))
	if !strings.Contains(s.log.String(), "new_server") {
		t.Fatalf("the reload did not start a new server:\n%s", s.log.String())
	}
	if s.sockets[0].udp != sock.udp {
		t.Fatal("the reload did not keep the UDP socket")
	}
	n := ok.Load()
	waitCount(n + 200)
	close(stop)
	wg.Wait()
	if f := failed.Load(); f != 0 {
		t.Fatalf("%d failed requests of %d across the reload; first: %v", f, f+ok.Load(), firstErr.Load())
	}
	t.Logf("%d requests over HTTP/3 across the reload, none failed", ok.Load())
}

func asStreamErr(err error, se **quic.StreamError) bool {
	for err != nil {
		if e, ok := err.(*quic.StreamError); ok {
			*se = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// TestReloadDropsH3: a reload that keeps a listener but takes h3 from its
// protocols stops taking HTTP/3 connections there at once; the
// connections open get GOAWAY and drain, and the UDP socket closes once
// they have (its port free again). A reload that serves h3 there again
// before that takes the socket back, connections and all; one after
// binds it anew.
func TestReloadDropsH3(t *testing.T) {
	release := make(chan struct{})
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Target == "/held" {
			<-release
		}
		c.Respond(200, "ok")
	})
	defer close(release)
	dir := t.TempDir()
	cfg, ca := h3Config(t, dir, up.Addr(), "10s")
	noH3 := strings.Replace(strings.Replace(cfg, "protocols: [h3, h2, http/1.1]", "protocols: [h2, http/1.1]", 1), "    early_data: safe\n", "", 1)
	s := startRunning(t, cfg)
	addr := s.addr(0)
	tlsConf := &tls.Config{RootCAs: ca.Pool(), ServerName: "example.com", NextProtos: []string{"h3"}}
	dial := func() *quic.Conn {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		qc, err := quic.DialAddr(ctx, addr, tlsConf, &quic.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qc.CloseWithError(0, "") })
		return qc
	}
	udp := s.sockets[0].udp

	// Taken away, given back while a request holds the old server: the
	// same socket serves on.
	held := dial()
	heldDone := make(chan int, 1)
	go func() {
		status, _, _ := h3Get(held, "/held")
		heldDone <- status
	}()
	wait.For(t, "the held request upstream", func() bool { return up.Count("GET", "/held") == 1 })
	s.reloadWith(t, noH3)
	if !strings.Contains(s.log.String(), "stopped serving HTTP/3") || s.sockets[0].udp != nil || s.sockets[0].retired == nil {
		t.Fatalf("after a reload without h3: udp %v, retired %v\n%s", s.sockets[0].udp, s.sockets[0].retired, s.log.String())
	}
	s.reloadWith(t, strings.Replace(cfg, "header: 10s", "header: 9s", 1))
	if s.sockets[0].udp != udp {
		t.Fatal("h3 given back before the drain: a new socket, not the one taken away")
	}
	if status, body, err := h3Get(dial(), "/"); err != nil || status != 200 || body != "ok" {
		t.Fatalf("after h3 came back: %d %q %v", status, body, err)
	}
	release <- struct{}{}
	if status := <-heldDone; status != 200 {
		t.Fatalf("the request held across the reloads: %d", status)
	}

	// Taken away for good: once the old server has drained, the socket
	// closes.
	s.reloadWith(t, noH3)
	r := s.sockets[0].retired
	wait.For(t, "the HTTP/3 socket closed after the drain", func() bool { return !r.open() })
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("the UDP port is still taken after the drain: %v", err)
	}
	pc.Close()
	s.reloadWith(t, cfg)
	if s.sockets[0].udp == nil || s.sockets[0].udp == udp {
		t.Fatal("h3 given back after the drain: no new socket")
	}
	if status, body, err := h3Get(dial(), "/"); err != nil || status != 200 || body != "ok" {
		t.Fatalf("h3 bound again: %d %q %v", status, body, err)
	}
}
