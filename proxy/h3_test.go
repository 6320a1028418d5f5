package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/sluice-proxy/sluice/h3"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

func TestH3Requests(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	hs := startH3(t, peers(testOptions(), up.Addr()), nil)
	qc := dialH3(t, hs.addr, hs.clientTLS(nil), false)
	long := strings.Repeat("0123456789abcdef", 1<<14) // 256 KiB
	tests := []struct {
		name    string
		method  string
		body    string
		fields  []string
		chunked bool
	}{
		{"GET", "GET", "", nil, false},
		{"POST with a length", "POST", "hello", []string{"content-length", "5"}, false},
		{"POST without a length", "POST", "hello", nil, true},
		{"a large POST", "POST", long, []string{"content-length", "262144"}, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			fields := append([]string{"cookie", "a=1", "cookie", "b=2"}, tt.fields...)
			resp, err := h3Request(qc, tt.method, "/echo?x=1", body, fields...)
			if err != nil {
				t.Fatal(err)
			}
			if resp.status != 200 || string(resp.body) != tt.body {
				t.Fatalf("%d, %d bytes; want 200 with %d", resp.status, len(resp.body), len(tt.body))
			}
			if resp.header["alt-svc"] != "" {
				t.Errorf("Alt-Svc %q on an HTTP/3 answer", resp.header["alt-svc"])
			}
			reqs := up.Requests()
			if len(reqs) != i+1 {
				t.Fatalf("%d requests upstream, want %d", len(reqs), i+1)
			}
			r := reqs[i]
			if r.Method != tt.method || r.Target != "/echo?x=1" {
				t.Errorf("upstream got %s %s", r.Method, r.Target)
			}
			if c, _ := field(r.Header, "Cookie"); c != "a=1; b=2" {
				t.Errorf("Cookie %q", c)
			}
			if p, _ := field(r.Header, "X-Forwarded-Proto"); p != "https" {
				t.Errorf("X-Forwarded-Proto %q", p)
			}
			if host, _ := field(r.Header, "Host"); host != "example.com" {
				t.Errorf("Host %q", host)
			}
			if _, ok := field(r.Header, "Early-Data"); ok {
				t.Errorf("Early-Data on a request after the handshake")
			}
			// A GET whose stream's end comes in a datagram of its own,
			// after the HEADERS, still goes without a body: the proxy
			// waits a little for the end (bodyProbe) before it assumes
			// a body of unknown length.
			if te, _ := field(r.Header, "Transfer-Encoding"); tt.chunked != (te == "chunked") {
				t.Errorf("Transfer-Encoding %q upstream", te)
			}
		})
	}
	wait.For(t, "the access log", func() bool { return strings.Contains(hs.access.String(), "protocol=HTTP/3") })
	h3conns := 0
	hs.srv.Connections(func(listener, protocol string) {
		if protocol == "h3" && listener == hs.addr {
			h3conns++
		}
	})
	if h3conns != 1 {
		t.Errorf("Connections reports %d h3 connections, want 1", h3conns)
	}
}

// warm makes a first connection, for a session ticket that allows 0-RTT.
func (h *h3harness) warm(t *testing.T) *notingCache {
	cache := newNotingCache()
	qc := dialH3(t, h.addr, h.clientTLS(cache), false)
	if _, err := h3Request(qc, "GET", "/warm", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cache.got:
	case <-time.After(5 * time.Second):
		t.Fatal("no session ticket")
	}
	qc.CloseWithError(0, "")
	return cache
}

// TestH3EarlyDataUnsafeTooEarly: a POST in 0-RTT gets 425 Too Early with
// Proxy-Status and never reaches the upstream; sent again after the
// handshake, it goes up once.
func TestH3EarlyDataUnsafeTooEarly(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	hs := startH3(t, peers(testOptions(), up.Addr()), func(o *QUICOptions) { o.EarlyData = true })
	cache := hs.warm(t)
	before := len(up.Requests())

	// The relay holds the client's end of the handshake: the server sees
	// the request before its handshake completes, as it would see a
	// replay's.
	r := newRelay(t, hs.addr, true, true)
	qc := dialH3(t, r.addr(), hs.clientTLS(cache), true)
	if qc.ConnectionState().TLS.HandshakeComplete {
		t.Fatal("the handshake completed at once")
	}
	resp, err := r.earlyRequest(t, hs, qc, "POST", "/order", []byte("pay 10"), "content-length", "6")
	if err != nil {
		t.Fatal(err)
	}
	if !qc.ConnectionState().Used0RTT {
		t.Fatal("0-RTT was not used")
	}
	if resp.status != 425 || !strings.Contains(resp.header["proxy-status"], "early data") {
		t.Fatalf("%d %q; want 425 with Proxy-Status", resp.status, resp.header["proxy-status"])
	}
	if n := len(up.Requests()); n != before {
		t.Fatalf("%d requests upstream after the 425", n-before)
	}
	select {
	case <-qc.HandshakeComplete():
	case <-time.After(5 * time.Second):
		t.Fatal("handshake not complete")
	}
	resp, err = h3Request(qc, "POST", "/order", []byte("pay 10"), "content-length", "6")
	if err != nil || resp.status != 200 || string(resp.body) != "pay 10" {
		t.Fatalf("after the handshake: %v %v", resp, err)
	}
	reqs := up.Requests()[before:]
	if len(reqs) != 1 || reqs[0].Method != "POST" {
		t.Fatalf("%d requests upstream, want the one POST", len(reqs))
	}
	if _, ok := field(reqs[0].Header, "Early-Data"); ok {
		t.Errorf("Early-Data on the request sent after the handshake")
	}
	wait.For(t, "the 425's log line", func() bool { return strings.Contains(hs.access.String(), "status=425") })
}

// TestH3EarlyDataReplayedGet: a client's first flight with a GET in 0-RTT,
// captured and sent by someone else from another address, has the GET
// forwarded, marked Early-Data: 1 so that the origin can refuse it; the
// replay's connection never completes its handshake.
func TestH3EarlyDataReplayedGet(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hi"))
	hs := startH3(t, peers(testOptions(), up.Addr()), func(o *QUICOptions) { o.EarlyData = true })
	cache := hs.warm(t)
	before := len(up.Requests())

	capture := newRelay(t, hs.addr, false, false) // forwards nothing: a capture
	qc := dialH3(t, capture.addr(), hs.clientTLS(cache), true)
	// content-length 0 says the GET has no body in the field section
	// itself: the capture need not wait for the datagram with the
	// stream's FIN, which may come apart from it.
	go h3Request(qc, "GET", "/balance", nil, "content-length", "0")
	select {
	case <-capture.sawEarly:
	case <-time.After(5 * time.Second):
		t.Fatal("no 0-RTT packet")
	}
	capture.replay(t, hs.addr)
	wait.For(t, "the replay upstream", func() bool { return len(up.Requests())-before >= 1 })
	for _, r := range up.Requests()[before:] {
		if r.Target != "/balance" {
			t.Errorf("upstream got %s", r.Target)
		}
		if v, _ := field(r.Header, "Early-Data"); v != "1" {
			t.Errorf("Early-Data %q upstream, want 1", v)
		}
	}
}

// TestH3EarlyDataBodyTooEarly: a GET with a body in 0-RTT is not safe to
// forward either.
func TestH3EarlyDataBodyTooEarly(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Echo())
	hs := startH3(t, peers(testOptions(), up.Addr()), func(o *QUICOptions) { o.EarlyData = true })
	cache := hs.warm(t)
	before := len(up.Requests())
	r := newRelay(t, hs.addr, true, true)
	qc := dialH3(t, r.addr(), hs.clientTLS(cache), true)
	resp, err := r.earlyRequest(t, hs, qc, "GET", "/search", []byte("q=1"))
	if err != nil || resp.status != 425 {
		t.Fatalf("%v %v; want 425", resp, err)
	}
	if n := len(up.Requests()); n != before {
		t.Fatalf("%d requests upstream", n-before)
	}
}

// TestH3UpstreamTooEarlyPasses: an upstream's own 425 goes to the client.
func TestH3UpstreamTooEarlyPasses(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Status(425, "too early here too"))
	hs := startH3(t, peers(testOptions(), up.Addr()), nil)
	qc := dialH3(t, hs.addr, hs.clientTLS(nil), false)
	resp, err := h3Request(qc, "GET", "/", nil)
	if err != nil || resp.status != 425 || string(resp.body) != "too early here too" {
		t.Fatalf("%v %v", resp, err)
	}
}

// slowUpstream answers 200 "done", each request for /slow once release
// is closed; arrived gets a value as each of those comes (up to 4).
func slowUpstream(t *testing.T) (up *upstreamtest.Server, arrived, release chan struct{}) {
	arrived, release = make(chan struct{}, 4), make(chan struct{})
	up = upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Target == "/slow" {
			arrived <- struct{}{}
			<-release
		}
		c.Respond(200, "done")
	})
	return up, arrived, release
}

// TestH3ShutdownGoAway: Shutdown sends GOAWAY; the request under way
// finishes, a stream the client opens afterwards is rejected with
// H3_REQUEST_REJECTED (not processed: the client may send it anywhere),
// and the connection then closes with H3_NO_ERROR.
func TestH3ShutdownGoAway(t *testing.T) {
	up, arrived, release := slowUpstream(t)
	hs := startH3(t, peers(testOptions(), up.Addr()), nil)
	qc := dialH3(t, hs.addr, hs.clientTLS(nil), false)
	ctrl := openControl(t, qc)
	goaway := readGoAway(ctrl)

	slow := make(chan *h3resp, 1)
	go func() {
		resp, _ := h3Request(qc, "GET", "/slow", nil)
		slow <- resp
	}()
	<-arrived
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- hs.srv.Shutdown(ctx)
	}()
	if id := awaitGoAway(t, goaway, "after Shutdown"); id != 4 {
		t.Errorf("GOAWAY %d, want 4 (the stream after the one served)", id)
	}
	// A stream opened after the GOAWAY: rejected, never processed.
	_, err := h3Request(qc, "POST", "/late", []byte("x"))
	var se *quic.StreamError
	if !asStreamError(err, &se) || se.ErrorCode != quic.StreamErrorCode(h3.ErrRequestRejected) {
		t.Fatalf("late stream: %v; want H3_REQUEST_REJECTED", err)
	}
	close(release)
	if resp := <-slow; resp == nil || resp.status != 200 {
		t.Fatalf("the request under way: %v", resp)
	}
	if code, ok := appErr(t, qc); !ok || code != uint64(h3.ErrNoError) {
		t.Errorf("connection closed with %#x, %v; want H3_NO_ERROR", code, ok)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	for _, r := range up.Requests() {
		if r.Target == "/late" {
			t.Error("the rejected request reached the upstream")
		}
	}
}

// TestDrain: Drain stops the Server taking requests at once, and leaves
// its QUIC accept loop running. The HTTP/3 connection gets GOAWAY (the
// request under way goes on; a stream opened after is refused, never
// processed), the idle HTTP/1.1 connection is closed, the TCP accept loop
// ends; a connection whose handshake completes after Drain is still taken,
// with GOAWAY 0, so that its client sends its requests elsewhere instead
// of waiting for a connection nobody serves. Shutdown then returns once
// the request under way has finished.
func TestDrain(t *testing.T) {
	up, arrived, release := slowUpstream(t)
	hs := startH3(t, peers(testOptions(), up.Addr()), nil)
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- hs.srv.Serve(ln) }()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
	br := bufio.NewReader(nc)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTP/1.1 before Drain: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	qc := dialH3(t, hs.addr, hs.clientTLS(nil), false)
	goaway := readGoAway(openControl(t, qc))
	slow := make(chan *h3resp, 1)
	go func() {
		resp, _ := h3Request(qc, "GET", "/slow", nil)
		slow <- resp
	}()
	<-arrived

	hs.srv.Drain()
	if id := awaitGoAway(t, goaway, "after Drain"); id != 4 {
		t.Errorf("GOAWAY %d, want 4 (the stream after the one served)", id)
	}
	_, err = h3Request(qc, "GET", "/late", nil)
	var se *quic.StreamError
	if !asStreamError(err, &se) || se.ErrorCode != quic.StreamErrorCode(h3.ErrRequestRejected) {
		t.Errorf("a stream opened after Drain: %v; want H3_REQUEST_REJECTED", err)
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("the idle HTTP/1.1 connection after Drain: read %d, %v; want it closed", n, err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Drain: %v, want ErrServerClosed", err)
	}

	late := dialH3(t, hs.addr, hs.clientTLS(nil), false)
	lateGoAway := readGoAway(openControl(t, late))
	if id := awaitGoAway(t, lateGoAway, "on a connection taken after Drain"); id != 0 {
		t.Errorf("GOAWAY %d on a connection taken after Drain, want 0", id)
	}
	_, err = h3Request(late, "GET", "/late", nil)
	if !asStreamError(err, &se) || se.ErrorCode != quic.StreamErrorCode(h3.ErrRequestRejected) {
		t.Errorf("a request on a connection taken after Drain: %v; want H3_REQUEST_REJECTED", err)
	}

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- hs.srv.Shutdown(ctx)
	}()
	close(release)
	if resp := <-slow; resp == nil || resp.status != 200 {
		t.Fatalf("the request under way: %v", resp)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	select {
	case <-hs.done:
	case <-time.After(5 * time.Second):
		t.Error("the QUIC accept loop did not end with Shutdown")
	}
	for _, r := range up.Requests() {
		if r.Target == "/late" {
			t.Error("a refused request reached the upstream")
		}
	}
}

// openControl opens the client's control stream with an empty SETTINGS,
// and returns the server's control stream once it comes.
func openControl(t *testing.T, qc *quic.Conn) *quic.ReceiveStream {
	t.Helper()
	cs, err := qc.OpenUniStream()
	if err != nil {
		t.Fatal(err)
	}
	cs.Write(appendH3Frame(quicvarint.Append(nil, 0), 0x04, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		rs, err := qc.AcceptUniStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		typ, err := quicvarint.Read(quicvarint.NewReader(rs))
		if err == nil && typ == 0 {
			return rs
		}
	}
}

// awaitGoAway returns the id of the GOAWAY ch brings (readGoAway), and
// fails the test when none has come within a failsafe's time.
func awaitGoAway(t *testing.T, ch <-chan uint64, what string) uint64 {
	t.Helper()
	select {
	case id := <-ch:
		return id
	case <-time.After(5 * time.Second):
		t.Fatalf("no GOAWAY %s", what)
	}
	return 0
}

// readGoAway reads the server's control stream and sends the id of its
// first GOAWAY.
func readGoAway(rs *quic.ReceiveStream) <-chan uint64 {
	ch := make(chan uint64, 1)
	go func() {
		r := quicvarint.NewReader(rs)
		for {
			typ, err := quicvarint.Read(r)
			if err != nil {
				return
			}
			n, err := quicvarint.Read(r)
			if err != nil {
				return
			}
			p := make([]byte, n)
			if _, err := readVarFull(r, p); err != nil {
				return
			}
			if typ == 0x07 {
				id, _, _ := quicvarint.Parse(p)
				ch <- id
				return
			}
		}
	}()
	return ch
}

func readVarFull(r quicvarint.Reader, p []byte) (int, error) {
	for i := range p {
		b, err := r.ReadByte()
		if err != nil {
			return i, err
		}
		p[i] = b
	}
	return len(p), nil
}

func asStreamError(err error, se **quic.StreamError) bool {
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

// TestH3HeaderListBound: a field section over limits.h3.max_header_list
// is answered 431 and never goes upstream.
func TestH3HeaderListBound(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hi"))
	hs := startH3(t, peers(testOptions(), up.Addr()), nil, func(s *Server) { s.H3.MaxHeaderList = 4 << 10 })
	qc := dialH3(t, hs.addr, hs.clientTLS(nil), false)
	resp, err := h3Request(qc, "GET", "/", nil, "x-big", strings.Repeat("a", 5<<10))
	if err != nil || resp.status != 431 {
		t.Fatalf("%v %v; want 431", resp, err)
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("%d requests upstream", n)
	}
	// The connection goes on.
	resp, err = h3Request(qc, "GET", "/", nil, "x-small", "a")
	if err != nil || resp.status != 200 {
		t.Fatalf("next request: %v %v", resp, err)
	}
}

// TestH3QPACKDynamicTableRefused: sluice announces no dynamic table; an
// encoder stream that inserts into one closes the connection with
// QPACK_ENCODER_STREAM_ERROR, and a field section that refers to one with
// QPACK_DECOMPRESSION_FAILED.
func TestH3QPACKDynamicTableRefused(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hi"))
	hs := startH3(t, peers(testOptions(), up.Addr()), nil)
	t.Run("encoder stream", func(t *testing.T) {
		qc := dialH3(t, hs.addr, hs.clientTLS(nil), false)
		es, err := qc.OpenUniStream()
		if err != nil {
			t.Fatal(err)
		}
		// Set Dynamic Table Capacity 0 (allowed), then Insert With
		// Literal Name "a: b".
		es.Write([]byte{0x02, 0x20, 0x41, 'a', 0x01, 'b'})
		if code, _ := appErr(t, qc); code != uint64(h3.ErrQPACKEncoder) {
			t.Errorf("closed with %#x, want QPACK_ENCODER_STREAM_ERROR", code)
		}
	})
	t.Run("dynamic reference", func(t *testing.T) {
		qc := dialH3(t, hs.addr, hs.clientTLS(nil), false)
		st, err := qc.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		// Required Insert Count 1: a reference to the dynamic table.
		st.Write(appendH3Frame(nil, 0x01, []byte{0x02, 0x00, 0x80}))
		st.Close()
		if code, _ := appErr(t, qc); code != uint64(h3.ErrQPACKDecompress) {
			t.Errorf("closed with %#x, want QPACK_DECOMPRESSION_FAILED", code)
		}
	})
}

// TestH3StreamsPerConnection: a client cannot open more request streams
// than limits.h3.max_concurrent_streams, those whose handler still runs
// counted; the credit comes back as they end.
func TestH3StreamsPerConnection(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 16)
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		arrived <- struct{}{}
		<-release
		c.Respond(200, "ok")
	})
	hs := startH3(t, peers(testOptions(), up.Addr()), func(o *QUICOptions) { o.H3.MaxConcurrentStreams = 3 })
	qc := dialH3(t, hs.addr, hs.clientTLS(nil), false)
	results := make(chan *h3resp, 3)
	for range 3 {
		go func() {
			resp, _ := h3Request(qc, "GET", "/hold", nil)
			results <- resp
		}()
	}
	for range 3 {
		<-arrived
	}
	if _, err := qc.OpenStream(); err == nil {
		t.Fatal("a fourth stream opened")
	}
	close(release)
	for range 3 {
		if resp := <-results; resp == nil || resp.status != 200 {
			t.Fatalf("held request: %v", resp)
		}
	}
	resp, err := h3Request(qc, "GET", "/after", nil)
	if err != nil || resp.status != 200 {
		t.Fatalf("after the credit came back: %v %v", resp, err)
	}
}

// TestH3RapidReset: a client that resets its streams as soon as it opens
// them, over and over, is closed with H3_EXCESSIVE_LOAD; the handlers of
// the streams it reset never outnumber the stream limit. With
// RapidResetPercent 100 the rule is off: the same client is served on.
func TestH3RapidReset(t *testing.T) {
	for _, percent := range []int{0, 100} {
		t.Run(strconv.Itoa(percent), func(t *testing.T) {
			up := upstreamtest.Start(t, upstreamtest.OK("hi"))
			hs := startH3(t, peers(testOptions(), up.Addr()), func(o *QUICOptions) { o.H3.MaxConcurrentStreams = 10 },
				func(s *Server) { s.H3.MaxConcurrentStreams, s.H3.RapidResetPercent = 10, percent })
			qc := dialH3(t, hs.addr, hs.clientTLS(nil), false)
			req := appendH3Headers(nil, []qpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
				{Name: ":authority", Value: "example.com"}, {Name: ":path", Value: "/"}})
			for i := 0; i < 200; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				st, err := qc.OpenStreamSync(ctx)
				cancel()
				if err != nil {
					break // closed
				}
				st.Write(req)
				st.CancelWrite(quic.StreamErrorCode(h3.ErrRequestCancelled))
				st.CancelRead(quic.StreamErrorCode(h3.ErrRequestCancelled))
			}
			if percent == 100 {
				if resp, err := h3Request(qc, "GET", "/", nil); err != nil || resp.status != 200 {
					t.Fatalf("with the rule off, after 200 resets: %v %v", resp, err)
				}
				return
			}
			if code, _ := appErr(t, qc); code != uint64(h3.ErrExcessiveLoad) {
				t.Errorf("closed with %#x, want H3_EXCESSIVE_LOAD", code)
			}
		})
	}
}

// TestH3RetryUnderFlood: above the rate of new connections RetryAbove
// allows, a client proves its address with a Retry token first, and is
// served.
func TestH3RetryUnderFlood(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hi"))
	hs := startH3(t, peers(testOptions(), up.Addr()), func(o *QUICOptions) { o.RetryAbove = 1 })
	var retried int
	for i := 0; i < 4; i++ {
		r := newRelay(t, hs.addr, true, false)
		qc := dialH3(t, r.addr(), hs.clientTLS(nil), false)
		resp, err := h3Request(qc, "GET", "/", nil)
		if err != nil || resp.status != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		r.mu.Lock()
		retried += r.retries
		r.mu.Unlock()
	}
	if retried == 0 {
		t.Fatal("no Retry sent above the rate")
	}
}

// TestH3AmplificationBound: to a client address not yet validated, the
// server sends about three times what it received at most (RFC 9000
// §8.1), however long the client stays silent after its first datagram:
// the relay passes the client's first datagram only, and the server's
// connection is watched until its handshake times out, everything it
// sent counted. quic-go stops sending once it has sent three times what
// it received, so its last datagram may take it past by less than one
// datagram (a factor of "3.x", quic-go/quic-go#2862): what it sent before
// its last datagram is under three times.
func TestH3AmplificationBound(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hi"))
	hs := startH3(t, peers(testOptions(), up.Addr()), func(o *QUICOptions) { o.RetryAbove = 1 << 20 })
	r := newRelay(t, hs.addr, true, false)
	r.mu.Lock()
	r.only = 1
	r.mu.Unlock()
	// X25519 alone, so that the ClientHello fits in the first datagram
	// (with a post-quantum key share it takes two).
	cfg := hs.clientTLS(nil)
	cfg.CurvePreferences = []tls.CurveID{tls.X25519}
	// The dial cannot complete (the relay passes one datagram); it
	// returns once cancelled, its connection and socket closed. The test
	// waits for that, so that nothing of it outlives the test.
	ctx, cancel := context.WithCancel(context.Background())
	dialed := make(chan struct{})
	go func() {
		defer close(dialed)
		if qc, err := quic.DialAddr(ctx, r.addr(), cfg, &quic.Config{}); err == nil {
			qc.CloseWithError(0, "")
		}
	}()
	defer func() { cancel(); <-dialed }()
	// The server takes the connection before the handshake completes
	// (its listener is an early one); it ends when the handshake times
	// out, which a client that never answers makes it do.
	var qc *quic.Conn
	wait.For(t, "the server's connection", func() bool {
		hs.srv.mu.Lock()
		defer hs.srv.mu.Unlock()
		for q := range hs.srv.h3conns {
			qc = q.hc.QUIC()
		}
		return qc != nil
	})
	select {
	case <-qc.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the server's connection to a silent client did not end in 30 s")
	}
	r.mu.Lock()
	sent, got, last, datagrams := r.toServer, r.fromServer, r.lastFromServer, r.forwarded
	r.mu.Unlock()
	if datagrams != 1 || got == 0 {
		t.Fatalf("the relay passed %d datagrams of the client, and the server sent %d bytes", datagrams, got)
	}
	if got-last >= 3*sent || last > 1500 {
		t.Fatalf("server sent %d bytes (its last datagram %d) to an unvalidated address that sent %d", got, last, sent)
	}
	t.Logf("the server sent %d bytes to an address that sent %d, over its whole handshake", got, sent)
}

// TestQUICSocketUnlisten: a socket that stops listening takes no new
// connection, and a server accepting on it still gets (and serves) those
// whose handshake completed before, then its accept loop ends; Set makes
// it listen again.
func TestQUICSocketUnlisten(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hi"))
	site := newSite(t)
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	qs, err := ListenQUIC(pc, QUICOptions{TLS: site.server()})
	if err != nil {
		t.Fatal(err)
	}
	defer qs.Close()
	addr := pc.LocalAddr().String()
	cfg := &tls.Config{ServerName: "example.com", RootCAs: site.ca.Pool(), NextProtos: []string{"h3"}}
	queued := dialH3(t, addr, cfg, false) // nothing accepts yet: it waits
	qs.Unlisten()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if qc, err := quic.DialAddr(ctx, addr, cfg, &quic.Config{HandshakeIdleTimeout: 300 * time.Millisecond}); err == nil {
		qc.CloseWithError(0, "")
		t.Fatal("a new connection was taken after Unlisten")
	}
	srv := &Server{Handler: peers(testOptions(), up.Addr())}
	defer srv.Shutdown(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.ServeQUIC(qs.Handoff(), ListenerOptions{}) }()
	if resp, err := h3Request(queued, "GET", "/", nil); err != nil || resp.status != 200 {
		t.Fatalf("the connection that waited: %v %v", resp, err)
	}
	select {
	case err := <-served:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ServeQUIC: %v, want net.ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("the accept loop did not end once the waiting connection was taken")
	}
	if err := qs.Set(QUICOptions{TLS: site.server()}); err != nil {
		t.Fatal(err)
	}
	go func() { served <- srv.ServeQUIC(qs.Handoff(), ListenerOptions{}) }()
	qc := dialH3(t, addr, cfg, false)
	if resp, err := h3Request(qc, "GET", "/", nil); err != nil || resp.status != 200 {
		t.Fatalf("listening again: %v %v", resp, err)
	}
}

// TestQUICSocketUnlistenIdle: UnlistenIdle lets a handshake under way
// complete, and its connection be served, before the socket stops taking
// new ones; Unlisten at that point would refuse it.
func TestQUICSocketUnlistenIdle(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("hi"))
	hs := startH3(t, peers(testOptions(), up.Addr()), nil)
	r := newRelay(t, hs.addr, true, false)
	r.mu.Lock()
	r.only = 1 // the first half of the ClientHello (a post-quantum key share takes two datagrams)
	r.mu.Unlock()
	dialed := make(chan *quic.Conn, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		qc, err := quic.DialAddr(ctx, r.addr(), hs.clientTLS(nil), &quic.Config{})
		if err != nil {
			t.Errorf("dial: %v", err)
		}
		dialed <- qc
	}()
	wait.For(t, "a handshake under way", func() bool {
		hs.qs.hs.mu.Lock()
		defer hs.qs.hs.mu.Unlock()
		return hs.qs.hs.n == 1
	})
	unlistened := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hs.qs.UnlistenIdle(ctx)
		close(unlistened)
	}()
	r.mu.Lock()
	r.only = 1 << 20 // the client's retransmissions complete it
	r.mu.Unlock()
	qc := <-dialed
	if qc == nil {
		t.FailNow()
	}
	defer qc.CloseWithError(0, "")
	if resp, err := h3Request(qc, "GET", "/", nil); err != nil || resp.status != 200 {
		t.Fatalf("the connection whose handshake was under way: %v %v", resp, err)
	}
	<-unlistened
}

// TestQUICSocketMark: an attempt from an address QUICOptions.Mark claims
// gets a Retry (verifySource true) and is not counted toward RetryAbove
// (2 here, not passed); the others are counted.
func TestQUICSocketMark(t *testing.T) {
	mark := &net.UDPAddr{IP: net.IPv4zero}
	q := &QUICSocket{mark: func(a net.Addr) bool { return a == net.Addr(mark) }}
	q.opts.RetryAbove = 2
	for i, tc := range []struct {
		addr  net.Addr
		retry bool
	}{
		{mark, true},
		{&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, false},
		{mark, true},
		{&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}, false},
	} {
		if got := q.verifySource(tc.addr); got != tc.retry {
			t.Errorf("attempt %d from %v: Retry %v, want %v", i, tc.addr, got, tc.retry)
		}
	}
	if n := q.rate.cur + q.rate.last; n != 2 {
		t.Errorf("%d attempts counted toward RetryAbove, want the 2 not marks", n)
	}
}
