package h2

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The client against two servers: this package's (NewConn) and x/net's
// http2.Server (h2c with prior knowledge), each on 127.0.0.1:0. Both answer
// the same paths:
//
//	/echo      the request body back, x-len and x-sum headers, request
//	           trailers back as echo-<name> trailers
//	/continue  100 (Continue), then as /echo
//	/hints     103 (Early Hints) with a link field, then 200 "ok"
//	/reset     200 header block, then the stream reset (INTERNAL_ERROR)
//	/hold      nothing until the test's release channel has a value, then 200
type backend struct {
	name string
	// start serves on 127.0.0.1:0 and returns the address; maxStreams 0
	// keeps the server's default; window 0 too.
	start func(t *testing.T, maxStreams, window uint32, release chan struct{}) string
}

var backends = []backend{
	{"sluice", startOwn},
	{"x/net", startXNet},
}

func ownHandler(release chan struct{}) Handler {
	status := func(s string, kv ...string) []hpack.HeaderField {
		h := []hpack.HeaderField{{Name: ":status", Value: s}}
		for i := 0; i < len(kv); i += 2 {
			h = append(h, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return h
	}
	return func(st *Stream) {
		path, _ := field(st.Header(), ":path")
		switch path {
		case "/continue":
			if st.WriteHeaders(status("100"), false) != nil {
				return
			}
			echo(st)
		case "/hints":
			if st.WriteHeaders(status("103", "link", "</a.css>; rel=preload"), false) != nil {
				return
			}
			st.WriteResponse(status("200"), []byte("ok"), true)
		case "/reset":
			if st.WriteHeaders(status("200"), false) != nil {
				return
			}
			st.Reset(http2.ErrCodeInternal)
		case "/hold":
			<-release
			st.WriteResponse(status("200"), []byte("held"), true)
		default:
			echo(st)
		}
	}
}

func startOwn(t *testing.T, maxStreams, window uint32, release chan struct{}) string {
	return newTestServer(t, &Settings{MaxConcurrentStreams: maxStreams, InitialWindow: window, ConnWindow: window}, ownHandler(release)).addr()
}

func xnetHandler(release chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hints":
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			w.Write([]byte("ok"))
			return
		case "/reset":
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "/hold":
			<-release
			w.Write([]byte("held"))
			return
		}
		// /echo and /continue: reading the body sends the 100.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		sum := sha256.Sum256(body)
		w.Header().Set("X-Len", strconv.Itoa(len(body)))
		w.Header().Set("X-Sum", hex.EncodeToString(sum[:]))
		for k := range r.Trailer {
			w.Header().Add("Trailer", "Echo-"+k)
		}
		w.WriteHeader(200)
		w.Write(body)
		for k, v := range r.Trailer {
			w.Header().Set("Echo-"+k, v[0])
		}
	})
}

func startXNet(t *testing.T, maxStreams, window uint32, release chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http2.Server{MaxConcurrentStreams: maxStreams}
	if window != 0 {
		srv.MaxUploadBufferPerStream = int32(window)
		srv.MaxUploadBufferPerConnection = int32(window)
	}
	h := xnetHandler(release)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				srv.ServeConn(nc, &http2.ServeConnOpts{Handler: h})
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// dialClient connects a ClientConn to addr, closed at the test's end.
func dialClient(t *testing.T, addr string, s *ClientSettings) *ClientConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cc := NewClientConn(nc, s)
	t.Cleanup(func() { cc.Close(); <-cc.Done() })
	return cc
}

// request builds a request header block; kv adds fields.
func request(method, path string, kv ...string) []hpack.HeaderField {
	h := []hpack.HeaderField{
		{Name: ":method", Value: method}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path}, {Name: ":authority", Value: "upstream.test"},
	}
	for i := 0; i < len(kv); i += 2 {
		h = append(h, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return h
}

type response struct {
	interim  [][]hpack.HeaderField
	header   []hpack.HeaderField
	status   string
	body     []byte
	trailers []hpack.HeaderField
}

func (r *response) get(name string) string { v, _ := field(r.header, name); return v }

// readResponse reads a whole response. The failsafe deadline only turns a
// hang into a failure.
func readResponse(cs *ClientStream) (*response, error) {
	cs.SetReadDeadline(time.Now().Add(failsafe))
	r := &response{}
	for {
		h, err := cs.ReadHeader()
		if err != nil {
			return r, err
		}
		status, _ := field(h, ":status")
		if status[0] == '1' {
			r.interim = append(r.interim, h)
			continue
		}
		r.header, r.status = h, status
		break
	}
	body, err := io.ReadAll(cs)
	r.body = body
	if err != nil {
		return r, err
	}
	r.trailers = cs.Trailers()
	return r, nil
}

// post sends body (nil: none) with trailers (name, value pairs) and reads
// the response.
func post(t *testing.T, cc *ClientConn, path string, body []byte, trailers []string, kv ...string) *response {
	t.Helper()
	if len(trailers) > 0 {
		kv = append(kv, "trailer", trailers[0])
	}
	cs, err := cc.OpenStream(request("POST", path, kv...), false)
	if err != nil {
		t.Fatal(err)
	}
	cs.SetWriteDeadline(time.Now().Add(failsafe))
	errc := make(chan error, 1)
	go func() {
		if _, err := cs.Write(body); err != nil {
			errc <- err
			return
		}
		if len(trailers) > 0 {
			var tr []hpack.HeaderField
			for i := 0; i < len(trailers); i += 2 {
				tr = append(tr, hpack.HeaderField{Name: trailers[i], Value: trailers[i+1]})
			}
			errc <- cs.WriteTrailers(tr)
			return
		}
		errc <- cs.CloseSend()
	}()
	r, err := readResponse(cs)
	if err != nil {
		t.Fatalf("response: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("request body: %v", err)
	}
	return r
}

func checkEcho(t *testing.T, r *response, body []byte) {
	t.Helper()
	sum := sha256.Sum256(body)
	if r.status != "200" || !bytes.Equal(r.body, body) || r.get("x-len") != strconv.Itoa(len(body)) || r.get("x-sum") != hex.EncodeToString(sum[:]) {
		t.Fatalf("echo: status %s, %d bytes, x-len %s (want %d)", r.status, len(r.body), r.get("x-len"), len(body))
	}
}

func TestClientExchanges(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 3<<20+123) // many 64 KiB windows each way
	for i := range big {
		big[i] = byte(rnd.Uint32())
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			// Small windows on both sides: every body crosses many.
			addr := b.start(t, 0, 65535, nil)
			cc := dialClient(t, addr, &ClientSettings{InitialWindow: 65535, ConnWindow: 65535})

			t.Run("get", func(t *testing.T) {
				cs, err := cc.OpenStream(request("GET", "/echo"), true)
				if err != nil {
					t.Fatal(err)
				}
				r, err := readResponse(cs)
				if err != nil {
					t.Fatal(err)
				}
				checkEcho(t, r, nil)
				if cs.ID() != 1 {
					t.Errorf("first stream id %d", cs.ID())
				}
			})
			t.Run("post", func(t *testing.T) {
				checkEcho(t, post(t, cc, "/echo", []byte("hello"), nil, "content-length", "5"), []byte("hello"))
			})
			t.Run("large", func(t *testing.T) {
				checkEcho(t, post(t, cc, "/echo", big, nil), big)
			})
			t.Run("trailers", func(t *testing.T) {
				r := post(t, cc, "/echo", []byte("with trailers"), []string{"x-checksum", "abc"})
				checkEcho(t, r, []byte("with trailers"))
				if v, _ := field(r.trailers, "echo-x-checksum"); v != "abc" {
					t.Fatalf("trailers %v", r.trailers)
				}
			})
			t.Run("100-continue", func(t *testing.T) {
				cs, err := cc.OpenStream(request("POST", "/continue", "expect", "100-continue"), false)
				if err != nil {
					t.Fatal(err)
				}
				cs.SetReadDeadline(time.Now().Add(failsafe))
				h, err := cs.ReadHeader()
				if err != nil {
					t.Fatal(err)
				}
				if s, _ := field(h, ":status"); s != "100" {
					t.Fatalf("first block %v, want 100", h)
				}
				if _, err := cs.Write([]byte("after continue")); err != nil {
					t.Fatal(err)
				}
				if err := cs.CloseSend(); err != nil {
					t.Fatal(err)
				}
				r, err := readResponse(cs)
				if err != nil {
					t.Fatal(err)
				}
				checkEcho(t, r, []byte("after continue"))
			})
			t.Run("103", func(t *testing.T) {
				cs, err := cc.OpenStream(request("GET", "/hints"), true)
				if err != nil {
					t.Fatal(err)
				}
				r, err := readResponse(cs)
				if err != nil {
					t.Fatal(err)
				}
				if len(r.interim) != 1 || r.status != "200" || string(r.body) != "ok" {
					t.Fatalf("interim %v, status %s, body %q", r.interim, r.status, r.body)
				}
				if s, _ := field(r.interim[0], ":status"); s != "103" {
					t.Fatalf("interim %v", r.interim[0])
				}
				if l, _ := field(r.interim[0], "link"); l != "</a.css>; rel=preload" {
					t.Fatalf("interim %v", r.interim[0])
				}
				if _, err := cs.ReadHeader(); err == nil {
					t.Fatal("ReadHeader after the final block succeeded")
				}
			})
			t.Run("reset after headers", func(t *testing.T) {
				cs, err := cc.OpenStream(request("GET", "/reset"), true)
				if err != nil {
					t.Fatal(err)
				}
				r, err := readResponse(cs)
				var re *ResetError
				if !errors.As(err, &re) || !re.Remote || re.Code != http2.ErrCodeInternal {
					t.Fatalf("got %v (status %q), want a reset INTERNAL_ERROR by the server", err, r.status)
				}
				if NotProcessed(err) {
					t.Fatal("NotProcessed true after a reset with INTERNAL_ERROR")
				}
			})
			if cc.Err() != nil || cc.Available() == 0 {
				t.Fatalf("connection unusable: %v, %d available", cc.Err(), cc.Available())
			}
		})
	}
}

func TestClientConcurrentStreams(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			cc := dialClient(t, b.start(t, 0, 0, nil), nil)
			const n = 64
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body := bytes.Repeat([]byte(fmt.Sprint(i)), 20000+i)
					cs, err := cc.OpenStream(request("POST", "/echo"), false)
					if err != nil {
						errs <- err
						return
					}
					go func() {
						cs.Write(body)
						cs.CloseSend()
					}()
					r, err := readResponse(cs)
					if err != nil || !bytes.Equal(r.body, body) {
						errs <- fmt.Errorf("stream %d: %v, %d bytes", cs.ID(), err, len(r.body))
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if a := cc.Active(); a != 0 {
				t.Errorf("%d streams active after all ended", a)
			}
			if _, idle := cc.IdleSince(); !idle {
				t.Error("not idle after all streams ended")
			}
		})
	}
}

// TestClientMaxConcurrentStreams: the server's limit is respected once its
// SETTINGS has arrived (a PING's acknowledgement comes after it).
func TestClientMaxConcurrentStreams(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			release := make(chan struct{}, 2)
			cc := dialClient(t, b.start(t, 2, 0, release), nil)
			if err := cc.Ping(context.Background()); err != nil {
				t.Fatal(err)
			}
			if a := cc.Available(); a != 2 {
				t.Fatalf("Available %d, want 2", a)
			}
			var held []*ClientStream
			for range 2 {
				cs, err := cc.OpenStream(request("GET", "/hold"), true)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, cs)
			}
			if a, n := cc.Available(), cc.Active(); a != 0 || n != 2 {
				t.Fatalf("Available %d Active %d, want 0 and 2", a, n)
			}
			if _, idle := cc.IdleSince(); idle {
				t.Fatal("idle with streams open")
			}
			_, err := cc.OpenStream(request("GET", "/hold"), true)
			if !errors.Is(err, ErrNoCapacity) || !NotProcessed(err) {
				t.Fatalf("third stream: %v, want ErrNoCapacity, not processed", err)
			}
			release <- struct{}{}
			r0, err0 := readResponseAny(held)
			if err0 != nil || string(r0.body) != "held" {
				t.Fatalf("held response: %v", err0)
			}
			if a := cc.Available(); a != 1 {
				t.Fatalf("Available %d after one stream ended, want 1", a)
			}
			release <- struct{}{}
		})
	}
}

// readResponseAny reads the response of whichever stream ends first.
func readResponseAny(streams []*ClientStream) (*response, error) {
	type res struct {
		r   *response
		err error
	}
	c := make(chan res, len(streams))
	for _, cs := range streams {
		go func() { r, err := readResponse(cs); c <- res{r, err} }()
	}
	x := <-c
	return x.r, x.err
}

// TestClientGracefulShutdownOwnServer: the package's server shutting down
// (two GOAWAYs, NO_ERROR) lets the open stream finish; the connection then
// says GOAWAY, graceful, and takes no new stream.
func TestClientGracefulShutdownOwnServer(t *testing.T) {
	release := make(chan struct{}, 1)
	ts := newTestServer(t, nil, ownHandler(release))
	cc := dialClient(t, ts.addr(), nil)
	cs, err := cc.OpenStream(request("GET", "/hold"), true)
	if err != nil {
		t.Fatal(err)
	}
	// The handler runs once the server has the stream: its conn exists.
	if err := cc.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts.conn(0).Shutdown()
	// The server answers this PING after its first GOAWAY.
	if err := cc.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ga *GoAwayError
	if err := cc.Err(); !errors.As(err, &ga) || !ga.Graceful() {
		t.Fatalf("Err %v, want a graceful *GoAwayError", err)
	}
	if cc.Available() != 0 {
		t.Fatal("streams available after GOAWAY")
	}
	if _, err := cc.OpenStream(request("GET", "/echo"), true); !errors.Is(err, ErrGoingAway) || !NotProcessed(err) {
		t.Fatalf("OpenStream after GOAWAY: %v", err)
	}
	release <- struct{}{}
	r, err := readResponse(cs)
	if err != nil || string(r.body) != "held" {
		t.Fatalf("stream below the last id: %v", err)
	}
	<-cc.Done()
}

// TestClientShutdown: our GOAWAY, then the close once the last stream ends.
func TestClientShutdown(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			release := make(chan struct{}, 1)
			cc := dialClient(t, b.start(t, 0, 0, release), nil)
			cs, err := cc.OpenStream(request("GET", "/hold"), true)
			if err != nil {
				t.Fatal(err)
			}
			cc.Shutdown()
			if _, err := cc.OpenStream(request("GET", "/echo"), true); !errors.Is(err, ErrGoingAway) {
				t.Fatalf("OpenStream after Shutdown: %v", err)
			}
			release <- struct{}{}
			if r, err := readResponse(cs); err != nil || string(r.body) != "held" {
				t.Fatalf("open stream after Shutdown: %v", err)
			}
			<-cc.Done()
		})
	}
}

// TestClientClose: Close fails open streams with ErrConnClosed, which may
// have been processed.
func TestClientClose(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	cc := dialClient(t, startOwn(t, 0, 0, release), nil)
	cs, err := cc.OpenStream(request("GET", "/hold"), true)
	if err != nil {
		t.Fatal(err)
	}
	cc.Close()
	_, err = cs.ReadHeader()
	if !errors.Is(err, ErrConnClosed) || NotProcessed(err) {
		t.Fatalf("after Close: %v", err)
	}
	<-cs.Done()
	<-cc.Done()
	if _, err := cc.OpenStream(request("GET", "/"), true); !errors.Is(err, ErrConnClosed) || !NotProcessed(err) {
		t.Fatalf("OpenStream after Close: %v", err)
	}
	if err := cc.Ping(context.Background()); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Ping after Close: %v", err)
	}
}

// TestClientDeadlines: a read deadline ends a wait for a server that does
// not answer; the error is a timeout, which may have been processed.
func TestClientDeadlines(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	cc := dialClient(t, startOwn(t, 0, 0, release), nil)
	cs, err := cc.OpenStream(request("GET", "/hold"), true)
	if err != nil {
		t.Fatal(err)
	}
	cs.SetReadDeadline(time.Now())
	_, err = cs.ReadHeader()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || NotProcessed(err) {
		t.Fatalf("ReadHeader past its deadline: %v", err)
	}
	if _, err := cs.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline: %v", err)
	}
	cs.Reset(http2.ErrCodeCancel)
	var re *ResetError
	if _, err := cs.Read(make([]byte, 1)); !errors.As(err, &re) || re.Remote || re.Code != http2.ErrCodeCancel {
		t.Fatalf("Read after Reset: %v", err)
	}
}

func TestClientInvalidRequest(t *testing.T) {
	cc := dialClient(t, startOwn(t, 0, 0, nil), nil)
	tests := []struct {
		name   string
		fields []hpack.HeaderField
	}{
		{"no method", request("GET", "/")[1:]},
		{"uppercase name", request("GET", "/", "X-Up", "1")},
		{"connection field", request("GET", "/", "connection", "close")},
		{"transfer-encoding", request("POST", "/", "transfer-encoding", "chunked")},
		{"te other than trailers", request("GET", "/", "te", "gzip")},
		{"CR in a value", request("GET", "/", "x", "a\rb")},
		{"pseudo after regular", append(request("GET", "/", "x", "1"), hpack.HeaderField{Name: ":x", Value: "1"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cc.OpenStream(tt.fields, true)
			if !errors.Is(err, ErrInvalidRequest) || !NotProcessed(err) {
				t.Fatalf("got %v, want ErrInvalidRequest", err)
			}
		})
	}
	if cc.Active() != 0 || cc.Err() != nil {
		t.Fatal("an invalid request touched the connection")
	}
	cs, err := cc.OpenStream(request("GET", "/echo"), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.WriteTrailers([]hpack.HeaderField{{Name: ":status", Value: "1"}}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("pseudo field in trailers: %v", err)
	}
	if _, err := readResponse(cs); err != nil {
		t.Fatal(err)
	}
}

// TestNotProcessedTable: the retry fact for each error a ClientStream or
// OpenStream can return, wrapped or not.
func TestNotProcessedTable(t *testing.T) {
	refused := &ResetError{StreamID: 1, Code: http2.ErrCodeRefusedStream, Remote: true}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"refused by the server", refused, true},
		{"refused, wrapped", fmt.Errorf("upstream: %w", refused), true},
		{"refused by this side", &ResetError{Code: http2.ErrCodeRefusedStream}, false},
		{"other reset by the server", &ResetError{Code: http2.ErrCodeInternal, Remote: true}, false},
		{"NO_ERROR reset by the server", &ResetError{Code: http2.ErrCodeNo, Remote: true}, false},
		{"GOAWAY below the stream", &GoAwayError{StreamID: 5, LastStreamID: 3}, true},
		{"GOAWAY below an answered stream", &GoAwayError{StreamID: 5, LastStreamID: 3, answered: true}, false},
		{"refused after an answer", &ResetError{Code: http2.ErrCodeRefusedStream, Remote: true, answered: true}, false},
		{"GOAWAY at the stream, then closed", &GoAwayError{StreamID: 3, LastStreamID: 3}, false},
		{"GOAWAY as the connection's state", &GoAwayError{LastStreamID: 3}, false},
		{"OpenStream: going away", &notSentError{ErrGoingAway}, true},
		{"OpenStream: no capacity", &notSentError{ErrNoCapacity}, true},
		{"OpenStream: closed", &notSentError{ErrConnClosed}, true},
		{"ErrGoingAway", ErrGoingAway, true},
		{"ErrNoCapacity", ErrNoCapacity, true},
		{"connection closed", ErrConnClosed, false},
		{"connection lost", &closedError{io.EOF}, false},
		{"connection error", &closedError{&ConnError{Code: http2.ErrCodeProtocol}}, false},
		{"timeout", &deadlineError{"read", 1}, false},
		{"other", errors.New("x"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NotProcessed(tt.err); got != tt.want {
				t.Fatalf("NotProcessed(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	if !errors.Is(&GoAwayError{StreamID: 3, LastStreamID: 3}, ErrConnClosed) || errors.Is(&GoAwayError{StreamID: 5, LastStreamID: 3}, ErrConnClosed) {
		t.Fatal("GoAwayError matches ErrConnClosed exactly when the stream was covered")
	}
}
