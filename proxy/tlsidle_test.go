//go:build linux && !race

package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestTLSIdleMemory measures what an idle TLS keep-alive client connection
// costs the proxy, and guards it: 300 connections, each through its
// handshake (TLS 1.3) and a GET, then idle long enough to park; once with
// clients as Go's and browsers are by default (a post-quantum key share,
// X25519MLKEM768, which makes the ClientHello about 1.8 KB), once with
// X25519 alone (about 0.3 KB). The clients run in a child process, so that
// the heap counted here is the proxy's alone (its upstream's test server's
// record of the requests aside, about 0.5 KB a connection): the Go heap in
// use after a GC, per connection. Parked connections hold no goroutine
// (the stacks in use are logged; what they add is the idle workers', 64 at
// most whatever the connections). The target is 8 KiB of RSS per
// connection; the README says where this stands and why (crypto/tls keeps
// the buffers its handshake grew to the ClientHello's size). What the
// larger ClientHello costs over X25519's is guarded too: handed to
// crypto/tls in records that fit its first read's buffer (helloConn), it
// costs its handshake buffer only (about 2.8 KB; 4.2-4.5 KB in one
// record). The race detector allocates on its own, hence the build tag.
func TestTLSIdleMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const (
		n = 300
		// A guard against growth, above what is measured today (see
		// the README), not the target.
		maxIdleBytes = 12 << 10
		// What the post-quantum key share may add.
		maxLargeHelloBytes = 3584
	)
	if os.Getenv("TLS_IDLE_HEAPPROFILE") != "" {
		runtime.MemProfileRate = 1
	}
	site := newSite(t)
	hs := startTLS(t, peers(testOptions(), quietUpstream(t)), site.server(), quietAccessLog)
	for i := 0; i < 20; i++ {
		c := hs.mustDialTLS(t, site.client())
		c.roundTrip("GET /warm HTTP/1.1\r\nHost: a\r\n\r\n")
		c.nc.Close()
	}
	hs.waitSettled(t)
	var stacks uint64
	inUse := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		stacks = m.StackInuse
		return m.HeapInuse
	}
	parked := func() int { return parkedConns(hs.srv) }
	perConn := map[string]float64{}
	for _, curves := range []string{"default", "x25519"} {
		before, stacksBefore := inUse(), stacks
		stop := idleClients(t, hs.addr, n, site, curves)
		wait.For(t, "the idle TLS connections to park", func() bool { return parked() == n })
		after := inUse()
		if f := os.Getenv("TLS_IDLE_HEAPPROFILE"); f != "" {
			w, _ := os.Create(f + "." + curves)
			pprof.Lookup("heap").WriteTo(w, 0)
			w.Close()
		}
		heap := (float64(after) - float64(before)) / n
		perConn[curves] = heap
		t.Logf("idle TLS 1.3 connection, %s key share: %.0f bytes of heap each, the proxy's side (%d connections, parked; stacks %+d KiB with %d idle workers)",
			curves, heap, n, (int64(stacks)-int64(stacksBefore))>>10, hs.srv.workers.Idle())
		if heap > maxIdleBytes {
			t.Errorf("%s key share: %.0f bytes per idle TLS connection, want at most %d", curves, heap, maxIdleBytes)
		}
		stop()
		wait.For(t, "the idle TLS connections to close", func() bool { return parked() == 0 })
	}
	if d := perConn["default"] - perConn["x25519"]; d > maxLargeHelloBytes {
		t.Errorf("the default key share's ClientHello costs %.0f bytes more per idle TLS connection than X25519's, want at most %d", d, maxLargeHelloBytes)
	}
}

// quietUpstream answers 200 "ok" and keeps nothing of the requests, and
// quietAccessLog writes the access log nowhere: what the memory tests
// count per connection is then the proxy's alone, not a line or a request
// record held by the test for each.
func quietUpstream(t *testing.T) string {
	return upstreamtest.Canned(t, []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), 0, nil)
}

func quietAccessLog(s *Server) { s.AccessLog = slog.New(slog.DiscardHandler) }

// idleClients starts TestTLSIdleClients in a child process: n keep-alive
// connections to addr, each after a GET, until stop.
func idleClients(t *testing.T, addr string, n int, site *tlsSite, curves string) (stop func()) {
	return idleClientsOf(t, addr, n, site, curves, "http/1.1")
}

// idleClientsOf is idleClients whose connections speak proto: http/1.1,
// or h2.
func idleClientsOf(t *testing.T, addr string, n int, site *tlsSite, curves, proto string) (stop func()) {
	child := exec.Command(os.Args[0], "-test.run=^TestTLSIdleClients$")
	child.Env = append(os.Environ(), "TLS_IDLE_ADDR="+addr, "TLS_IDLE_N="+strconv.Itoa(n),
		"TLS_IDLE_CA="+string(site.ca.PEM), "TLS_IDLE_CURVES="+curves, "TLS_IDLE_PROTO="+proto)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		stdin.Close()
		child.Wait()
	}
	t.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("the clients' process said %q (%v)", line, err)
	}
	return stop
}

// TestTLSIdleClients is TestTLSIdleMemory's child process: it opens
// TLS_IDLE_N keep-alive connections to TLS_IDLE_ADDR, sends a GET on each
// and reads the answer, says "ready" and holds them until its standard
// input closes.
func TestTLSIdleClients(t *testing.T) {
	addr := os.Getenv("TLS_IDLE_ADDR")
	if addr == "" {
		t.Skip("the child process of TestTLSIdleMemory")
	}
	n, _ := strconv.Atoi(os.Getenv("TLS_IDLE_N"))
	block, _ := pem.Decode([]byte(os.Getenv("TLS_IDLE_CA")))
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	cfg := &tls.Config{ServerName: "example.com", RootCAs: roots, NextProtos: []string{"http/1.1"}}
	if os.Getenv("TLS_IDLE_CURVES") == "x25519" {
		cfg.CurvePreferences = []tls.CurveID{tls.X25519}
	}
	h2 := os.Getenv("TLS_IDLE_PROTO") == "h2"
	if h2 {
		cfg.NextProtos = []string{"h2"}
	}
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if h2 {
			if err := idleH2(c); err != nil {
				t.Fatal(err)
			}
			continue
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}

// idleH2 makes c an idle HTTP/2 connection as a browser leaves one: the
// preface, SETTINGS acknowledged both ways, one GET answered.
func idleH2(c net.Conn) error {
	io.WriteString(c, h2Preface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":path", Value: "/"}, {Name: ":authority", Value: "example.com"}} {
		enc.WriteField(f)
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			fr.WriteSettingsAck()
		}
		if f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream) {
			return nil
		}
	}
}

// TestH2IdleMemory measures what an idle HTTP/2 client connection over
// TLS 1.3 costs the proxy, heap and stack apart, once parked (its engine
// returned h2.ErrIdle and its goroutine ended), beside the target of
// 16 KiB.
func TestH2IdleMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const (
		n = 300
		// A guard against growth above what is measured today (see
		// the README; 10.3-11.7 KB, heap and stack), not the target.
		maxIdleBytes = 14 << 10
	)
	if os.Getenv("H2_IDLE_HEAPPROFILE") != "" {
		runtime.MemProfileRate = 1
	}
	site := newSite(t)
	hs := startTLS(t, peers(testOptions(), quietUpstream(t)), site.server(), quietAccessLog)
	inUse := func() (uint64, uint64) {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapInuse, m.StackInuse
	}
	speaking := func() int {
		hs.srv.mu.Lock()
		defer hs.srv.mu.Unlock()
		k := 0
		for c := range hs.srv.conns {
			if c.h2.Load() != nil {
				k++
			}
		}
		return k
	}
	heapBefore, stackBefore := inUse()
	parked := func() int { return parkedConns(hs.srv) }
	stop := idleClientsOf(t, hs.addr, n, site, "default", "h2")
	wait.For(t, "the HTTP/2 connections", func() bool { return speaking() == n })
	wait.For(t, "the HTTP/2 connections to park", func() bool { return parked() == n })
	heapAfter, stackAfter := inUse()
	if f := os.Getenv("H2_IDLE_HEAPPROFILE"); f != "" {
		w, _ := os.Create(f)
		pprof.Lookup("heap").WriteTo(w, 0)
		w.Close()
	}
	heap := (float64(heapAfter) - float64(heapBefore)) / n
	stack := (float64(stackAfter) - float64(stackBefore)) / n
	t.Logf("idle HTTP/2 connection over TLS 1.3: %.0f bytes of heap and %.0f of stack each, the proxy's side (%d connections, parked, no goroutine each: the stacks are the runtime's cache and idle workers', shared by all)",
		heap, stack, n)
	if heap+stack > maxIdleBytes {
		t.Errorf("%.0f bytes per idle HTTP/2 connection, want at most %d", heap+stack, maxIdleBytes)
	}
	stop()
}

// TestHalfOpenHandshakeMemory guards what a connection costs while its
// ClientHello has not come whole: 300 connections, half of which sent
// part of a ClientHello, the other half nothing, wait without a goroutine
// and their bytes unread (conn.awaitHello). The heap counted includes the
// test's own end of each connection (about 0.4 KB); with a goroutine in
// the handshake each cost about 9 KB (heap and stack).
func TestHalfOpenHandshakeMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const (
		n            = 300
		maxHalfBytes = 3 << 10
	)
	site := newSite(t)
	hs := startTLS(t, peers(testOptions(), "127.0.0.1:1"), site.server(), func(s *Server) { s.HeaderTimeout = time.Minute })
	inUse := func() (uint64, uint64) {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapInuse, m.StackInuse
	}
	parked := func() int { return parkedConns(hs.srv) }
	heap0, stack0 := inUse()
	for i := 0; i < n; i++ {
		c := hs.dial(t)
		if i%2 == 0 {
			c.send(partialHello)
		}
	}
	wait.For(t, "the half-open handshakes to park", func() bool { return parked() == n })
	heap1, stack1 := inUse()
	per := (float64(heap1) - float64(heap0)) / n
	t.Logf("half-open handshake: %.0f bytes of heap each, both ends (stacks %+d KiB)", per, (int64(stack1)-int64(stack0))>>10)
	if per > maxHalfBytes {
		t.Errorf("%.0f bytes per half-open handshake, want at most %d", per, maxHalfBytes)
	}
}
