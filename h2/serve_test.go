package h2

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// testServer serves h2 with prior knowledge on 127.0.0.1:0.
type testServer struct {
	t     *testing.T
	ln    net.Listener
	mu    sync.Mutex
	conns []*Conn
	errs  chan error
	wg    sync.WaitGroup
}

func newTestServer(t *testing.T, s *Settings, h Handler) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, ln: ln, errs: make(chan error, 1000)}
	ts.wg.Add(1)
	go func() {
		defer ts.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			c := NewConn(nc, nil, s, h)
			ts.mu.Lock()
			ts.conns = append(ts.conns, c)
			ts.mu.Unlock()
			ts.wg.Add(1)
			go func() {
				defer ts.wg.Done()
				ts.errs <- c.Serve()
			}()
		}
	}()
	t.Cleanup(ts.close)
	return ts
}

func (ts *testServer) addr() string { return ts.ln.Addr().String() }

func (ts *testServer) close() {
	ts.ln.Close()
	ts.mu.Lock()
	for _, c := range ts.conns {
		c.Close()
	}
	ts.mu.Unlock()
	ts.wg.Wait()
}

// conn returns the i-th accepted connection.
func (ts *testServer) conn(i int) *Conn {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.conns[i]
}

func newClient(t *testing.T) *http.Client {
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func field(fields []hpack.HeaderField, name string) (string, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// echo answers with the body's length and hash in headers, the body itself,
// and the request's trailers echoed as response trailers.
func echo(st *Stream) {
	body, err := io.ReadAll(st)
	if err != nil {
		return
	}
	sum := sha256.Sum256(body)
	method, _ := field(st.Header(), ":method")
	path, _ := field(st.Header(), ":path")
	if err := st.WriteHeaders([]hpack.HeaderField{
		{Name: ":status", Value: "200"},
		{Name: "x-method", Value: method},
		{Name: "x-path", Value: path},
		{Name: "x-len", Value: strconv.Itoa(len(body))},
		{Name: "x-sum", Value: hex.EncodeToString(sum[:])},
	}, false); err != nil {
		return
	}
	if _, err := st.Write(body); err != nil {
		return
	}
	var tr []hpack.HeaderField
	for _, f := range st.Trailers() {
		tr = append(tr, hpack.HeaderField{Name: "echo-" + f.Name, Value: f.Value})
	}
	if len(tr) > 0 {
		st.WriteTrailers(tr)
		return
	}
	st.End()
}

func TestTransportRequests(t *testing.T) {
	ts := newTestServer(t, nil, echo)
	client := newClient(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: several windows each way
	tests := []struct {
		name    string
		method  string
		body    []byte
		length  int64 // -1: no content-length
		trailer http.Header
	}{
		{"get", "GET", nil, 0, nil},
		{"post with length", "POST", []byte("hello"), 5, nil},
		{"post without length", "POST", []byte("streamed body"), -1, nil},
		{"large post", "PUT", big, int64(len(big)), nil},
		{"large post without length", "POST", big, -1, nil},
		{"trailers", "POST", []byte("with trailers"), -1, http.Header{"X-Checksum": {"abc"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != nil {
				body = bytes.NewReader(tt.body)
				if tt.length < 0 {
					body = io.MultiReader(body) // hides the length
				}
			}
			req, err := http.NewRequest(tt.method, "http://"+ts.addr()+"/p?q=1", body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tt.length
			if tt.body == nil {
				req.ContentLength = 0
			}
			req.Trailer = tt.trailer
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != 200 || res.ProtoMajor != 2 {
				t.Fatalf("status %d proto %d", res.StatusCode, res.ProtoMajor)
			}
			if !bytes.Equal(got, tt.body) {
				t.Fatalf("body: got %d bytes, want %d", len(got), len(tt.body))
			}
			if m := res.Header.Get("X-Method"); m != tt.method {
				t.Errorf("method %q", m)
			}
			if p := res.Header.Get("X-Path"); p != "/p?q=1" {
				t.Errorf("path %q", p)
			}
			for k, v := range tt.trailer {
				if got := res.Trailer.Get("Echo-" + k); got != v[0] {
					t.Errorf("trailer %s: got %q want %q (%v)", k, got, v[0], res.Trailer)
				}
			}
		})
	}
}

func TestTransportConcurrentStreams(t *testing.T) {
	ts := newTestServer(t, nil, echo)
	client := newClient(t)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := strings.Repeat(fmt.Sprint(i), 10000+i)
			res, err := client.Post("http://"+ts.addr()+"/", "text/plain", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			got, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || string(got) != body {
				errs <- fmt.Errorf("request %d: %v, %d bytes", i, err, len(got))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ts.mu.Lock()
	n := len(ts.conns)
	ts.mu.Unlock()
	if n != 1 {
		t.Errorf("%d connections, want the streams multiplexed on 1", n)
	}
}

// TestWriteResponse: a small response leaves as HEADERS and DATA together.
func TestWriteResponseSmall(t *testing.T) {
	ts := newTestServer(t, nil, func(st *Stream) {
		st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "201"}, {Name: "content-type", Value: "text/plain"}}, []byte("made"), true)
	})
	res, err := newClient(t).Get("http://" + ts.addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 201 || string(got) != "made" || res.Header.Get("Content-Type") != "text/plain" {
		t.Fatalf("got %d %q %v", res.StatusCode, got, res.Header)
	}
}

// writeCounter counts the writes made to its connection.
type writeCounter struct {
	net.Conn
	n atomic.Int32
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.n.Add(1)
	return w.Conn.Write(p)
}

// TestResponseInOneWrite: a handler writing its response in pieces that
// follow one another at once (a head, a message, trailers: a gRPC answer)
// has them leave in one write to the connection, not one each. Run with
// one P, so that the flush left to uncork runs only once the handler
// yields, as it does under load.
func TestResponseInOneWrite(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	handled := make(chan struct{})
	counted := make(chan *writeCounter, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		wc := &writeCounter{Conn: nc}
		counted <- wc
		c := NewConn(wc, nil, nil, func(st *Stream) {
			defer close(handled)
			before := wc.n.Load()
			st.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}, false)
			st.Write([]byte("\x00\x00\x00\x00\x02hi"))
			st.WriteTrailers([]hpack.HeaderField{{Name: "grpc-status", Value: "0"}})
			if n := wc.n.Load() - before; n != 1 {
				t.Errorf("the response took %d writes, want 1", n)
			}
		})
		t.Cleanup(c.Close)
		c.Serve()
	}()
	rc := handshake(t, ln.Addr().String())
	<-counted
	rc.sync()
	rc.headers(1, true, getReq...)
	<-handled
	if s, body := rc.wantResponse(1); s != "200" || string(body) != "\x00\x00\x00\x00\x02hi" {
		t.Fatalf("%q %q", s, body)
	}
}

// Fields marked Sensitive go out never indexed, whether the encoder
// writes them or the block's own shortcut does ("x-" names, raw strings),
// and the blocks around them decode as written, table entries and the
// size update at a block's start included.
func TestSensitiveFields(t *testing.T) {
	long := strings.Repeat("v", 300) // a length past the 7-bit prefix
	blocks := [][]hpack.HeaderField{
		{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "text/plain"},
			{Name: "x-request-id", Value: "0123456789abcdef", Sensitive: true}, {Name: "server", Value: "up"}},
		{{Name: ":status", Value: "200"}, {Name: "x-long", Value: long, Sensitive: true},
			{Name: "content-type", Value: "text/plain"}, {Name: "authorization", Value: "secret", Sensitive: true}},
		{{Name: "x-first", Value: "first in its block", Sensitive: true}, {Name: "server", Value: "up"}},
	}
	var out bytes.Buffer
	fr := http2.NewFramer(&out, &out)
	var h headerEncoder
	dec := hpack.NewDecoder(4096, nil)
	for i, fields := range blocks {
		if i == 2 {
			// A table size change: its update must open the next block.
			h.setLimit(1024)
		}
		if err := writeFragments(fr, uint32(2*i+1), h.encode(nil, fields), true, 16384); err != nil {
			t.Fatal(err)
		}
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		got, err := dec.DecodeFull(f.(*http2.HeadersFrame).HeaderBlockFragment())
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if !slices.Equal(got, fields) {
			t.Fatalf("block %d decoded as %v, want %v", i, got, fields)
		}
	}
}
