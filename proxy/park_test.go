package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy/internal/park"
)

// Idle keep-alive connections give up their goroutines after parkAfter
// (on Linux) and come back when their next request arrives.
func TestIdleConnectionsPark(t *testing.T) {
	if !park.Supported {
		t.Skip("no parker on this platform: idle connections keep their goroutine")
	}
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()))
	hs.get(t, "/warm")
	time.Sleep(2 * parkAfter)
	// Idle workers (workers.go) wait for any connection, not for these.
	serving := func() int { return runtime.NumGoroutine() - hs.srv.workers.Idle() }
	base := serving()

	const n = 50
	var clients []*client
	for i := 0; i < n; i++ {
		c := hs.dial(t)
		if resp, _ := c.roundTrip("GET /a HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		clients = append(clients, c)
	}
	waitFor(t, "idle connections to park", func() bool { return serving() < base+n/2 })
	for i, c := range clients {
		if resp, body := c.roundTrip("GET /b HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("client %d after parking: %d %q", i, resp.StatusCode, body)
		}
	}
}

func TestParkedConnectionIdleTimeout(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) { s.IdleTimeout = parkAfter + 300*time.Millisecond })
	c := hs.dial(t)
	if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	start := time.Now()
	if !c.closed(5 * time.Second) {
		t.Fatal("a parked connection outlived its idle timeout")
	}
	if d := time.Since(start); d < parkAfter {
		t.Fatalf("closed after %v, before the idle timeout", d)
	}
}

func TestParkedConnectionClosedByClient(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	time.Sleep(2 * parkAfter)
	hs.srv.mu.Lock()
	before := len(hs.srv.conns)
	hs.srv.mu.Unlock()
	c.nc.Close()
	waitFor(t, "the parked connection to be forgotten", func() bool {
		hs.srv.mu.Lock()
		defer hs.srv.mu.Unlock()
		return len(hs.srv.conns) == before-1
	})
}

// A slow head parked behind idle connections, whose deadlines are later,
// is answered at its own: the parker orders deadlines, not arrivals. Then
// the parker lingers on the closing connection, reading what the client
// still sends, until the client closes.
func TestParkedSlowHeadAnsweredBeforeIdleOnes(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) {
		s.IdleTimeout = time.Minute
		s.HeaderTimeout = parkAfter + 300*time.Millisecond
	})
	for i := 0; i < 3; i++ {
		c := hs.dial(t)
		if resp, _ := c.roundTrip("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
	}
	time.Sleep(2 * parkAfter) // the idle ones park, deadlines a minute away
	c := hs.dial(t)           // reads time out after 10s: long before a minute
	c.send("GET / HTTP/1.1\r\nHo")
	resp, err := readHTTP(c)
	if err != nil {
		t.Fatalf("no answer to a slow head parked behind idle connections: %v", err)
	}
	if resp.StatusCode != 408 {
		t.Fatalf("slow head: %s, want 408", resp.Status)
	}
	c.send("st: still sending") // read and thrown away while lingering
	c.nc.(*net.TCPConn).CloseWrite()
	if !c.closed(5 * time.Second) {
		t.Fatal("the lingering connection was not closed after the client's close")
	}
}

// h2Raw is an HTTP/2 client driven frame by frame, for what Go's client
// does not show: GOAWAYs, PINGs, the close.
type h2Raw struct {
	t      *testing.T
	nc     net.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	buf    bytes.Buffer
	fields []hpack.HeaderField // of the last response's head
}

// dialH2Raw opens an h2c connection to addr: preface, SETTINGS, and the
// acknowledgement of the server's.
func dialH2Raw(t *testing.T, addr string) *h2Raw {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &h2Raw{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.buf)
	io.WriteString(nc, h2Preface)
	c.fr.WriteSettings()
	c.next(func(f http2.Frame) bool { sf, ok := f.(*http2.SettingsFrame); return ok && !sf.IsAck() })
	c.fr.WriteSettingsAck()
	return c
}

// next reads frames until want takes one, and returns it.
func (c *h2Raw) next(want func(http2.Frame) bool) http2.Frame {
	c.t.Helper()
	f, err := c.tryNext(want)
	if err != nil {
		c.t.Fatalf("reading frames: %v", err)
	}
	return f
}

func (c *h2Raw) tryNext(want func(http2.Frame) bool) (http2.Frame, error) {
	for {
		c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := c.fr.ReadFrame()
		if err != nil || want(f) {
			return f, err
		}
	}
}

// get sends a GET on stream id and reads its response to the end.
func (c *h2Raw) get(id uint32) (status string, body []byte) {
	c.t.Helper()
	status, body, err := c.tryGet(id)
	if err != nil {
		c.t.Fatal(err)
	}
	return status, body
}

// tryGet is get, for another goroutine than the test's: it fails with an
// error.
func (c *h2Raw) tryGet(id uint32) (status string, body []byte, err error) {
	c.buf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", "a"}} {
		c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndStream: true, EndHeaders: true})
	for {
		f, err := c.tryNext(func(f http2.Frame) bool { return f.Header().StreamID == id })
		if err != nil {
			return status, body, fmt.Errorf("stream %d: %w", id, err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if status == "" {
				status, c.fields = f.PseudoValue("status"), f.Fields
			}
			if f.StreamEnded() {
				return status, body, nil
			}
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				return status, body, nil
			}
		case *http2.RSTStreamFrame:
			return status, body, fmt.Errorf("stream %d reset: %v", id, f.ErrCode)
		}
	}
}

// goAway reads until a GOAWAY and returns it.
func (c *h2Raw) goAway() *http2.GoAwayFrame {
	c.t.Helper()
	return c.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
}

// closed reports whether the server closes the connection within d,
// whatever frames come first.
func (c *h2Raw) closed(d time.Duration) bool {
	c.nc.SetReadDeadline(time.Now().Add(d))
	for {
		if _, err := c.fr.ReadFrame(); err != nil {
			return !errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}

// An idle HTTP/2 connection parks as an HTTP/1.1 one does (its engine
// stops, its goroutine ends), and comes back on its next request; at
// Shutdown it gets the graceful close's two GOAWAYs, not a bare close.
func TestH2ConnectionsPark(t *testing.T) {
	if !park.Supported {
		t.Skip("no parker on this platform: idle connections keep their goroutine")
	}
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs, _ := startH2(t, peers(testOptions(), up.Addr()), h2c())
	c := dialH2Raw(t, hs.addr)
	if s, b := c.get(1); s != "200" || string(b) != "ok" {
		t.Fatalf("%q %q", s, b)
	}
	waitFor(t, "the HTTP/2 connection to park", func() bool { return parkedConns(hs.srv) == 1 })
	if s, b := c.get(3); s != "200" || string(b) != "ok" {
		t.Fatalf("after parking: %q %q", s, b)
	}
	waitFor(t, "the HTTP/2 connection to park again", func() bool { return parkedConns(hs.srv) == 1 })

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- hs.srv.Shutdown(ctx)
	}()
	if ga := c.goAway(); ga.LastStreamID != 1<<31-1 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("first GOAWAY: last stream %d, %v", ga.LastStreamID, ga.ErrCode)
	}
	ping := c.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	c.fr.WritePing(true, ping.Data)
	if ga := c.goAway(); ga.LastStreamID != 3 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("final GOAWAY: last stream %d, %v", ga.LastStreamID, ga.ErrCode)
	}
	c.nc.Close()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// A parked HTTP/2 connection is ended at its idle timeout by its engine,
// with GOAWAY(NO_ERROR) naming the last stream served.
func TestH2ParkedConnectionIdleTimeout(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs, _ := startH2(t, peers(testOptions(), up.Addr()), h2c(), func(s *Server) { s.IdleTimeout = parkAfter + 300*time.Millisecond })
	c := dialH2Raw(t, hs.addr)
	c.get(1)
	begun := time.Now()
	if ga := c.goAway(); ga.LastStreamID != 1 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("GOAWAY: last stream %d, %v", ga.LastStreamID, ga.ErrCode)
	}
	if d := time.Since(begun); d < parkAfter {
		t.Fatalf("GOAWAY after %v, before the idle timeout", d)
	}
	if !c.closed(5 * time.Second) {
		t.Fatal("not closed after the GOAWAY")
	}
}

// Connections that idle just past parkAfter between requests park and
// resume over and over, concurrently, and every request is answered: the
// race detector watches the hand-over of each connection between its
// goroutines and the parker.
func TestH2ParkResumeChurn(t *testing.T) {
	if !park.Supported {
		t.Skip("no parker on this platform")
	}
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs, _ := startH2(t, peers(testOptions(), up.Addr()), h2c())
	const clients, rounds = 16, 6
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		c := dialH2Raw(t, hs.addr)
		go func() {
			// t.Fatal may not be called here: h2Raw's failures are
			// the test's, so each request's outcome comes back.
			for r := 0; r < rounds; r++ {
				time.Sleep(parkAfter + time.Duration(r*10)*time.Millisecond)
				id := uint32(2*r + 1)
				if s, b, err := c.tryGet(id); err != nil || s != "200" || string(b) != "ok" {
					errs <- fmt.Errorf("round %d: %q %q %v", r, s, b, err)
					return
				}
			}
			errs <- nil
		}()
	}
	stop := make(chan struct{})
	most := make(chan int)
	go func() {
		m := 0
		for {
			select {
			case <-stop:
				most <- m
				return
			case <-time.After(10 * time.Millisecond):
				m = max(m, parkedConns(hs.srv))
			}
		}
	}()
	for i := 0; i < clients; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(stop)
	if m := <-most; m == 0 {
		t.Error("no connection was seen parked")
	}
	if got := len(up.Requests()); got != clients*rounds {
		t.Errorf("upstream saw %d requests, want %d", got, clients*rounds)
	}
}

// Over TLS too, an idle HTTP/2 connection parks and serves its next
// request on the same connection: the parker waits on the socket under
// TLS, and the engine parks only after a read that found no whole record.
func TestH2OverTLSParks(t *testing.T) {
	if !park.Supported {
		t.Skip("no parker on this platform")
	}
	site := newSite(t)
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := startTLS(t, peers(testOptions(), up.Addr()), site.server())
	cfg := site.client()
	cfg.NextProtos = []string{"h2"}
	tr := &http2.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := 0; i < 3; i++ {
		reused := false
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) { reused = ci.Reused },
		})
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+hs.addr+"/", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" || resp.ProtoMajor != 2 {
			t.Fatalf("request %d: %d %q over HTTP/%d", i, resp.StatusCode, b, resp.ProtoMajor)
		}
		if i > 0 && !reused {
			t.Fatalf("request %d took a new connection after the first parked", i)
		}
		waitFor(t, "the connection to park", func() bool { return parkedConns(hs.srv) == 1 })
	}
}

// parkedConns returns how many connections srv's parker holds (0 where
// there is none).
func parkedConns(srv *Server) int {
	if srv.parker == nil {
		return 0
	}
	return srv.parker.Len()
}
