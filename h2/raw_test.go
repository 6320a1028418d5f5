package h2

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawClient drives the server frame by frame, for the protocol-error and
// abuse cases a well-behaved client cannot produce.
type rawClient struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	ebuf bytes.Buffer
}

// failsafe bounds every read of a raw client, so that a test whose server
// never answers fails instead of hanging; no assertion depends on it.
const failsafe = 20 * time.Second

// dialRaw connects and sends the preface and settings (none given: an empty
// SETTINGS frame); it does not read.
func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := newRawClient(t, nc)
	rc.start(settings...)
	return rc
}

// newRawClient drives nc; it writes nothing.
func newRawClient(t *testing.T, nc net.Conn) *rawClient {
	rc := &rawClient{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	rc.fr.AllowIllegalWrites = true
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.fr.MaxHeaderListSize = 1 << 20
	rc.enc = hpack.NewEncoder(&rc.ebuf)
	return rc
}

// start sends the client preface and SETTINGS with settings.
func (rc *rawClient) start(settings ...http2.Setting) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.nc, http2.ClientPreface); err != nil {
		rc.t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(settings...); err != nil {
		rc.t.Fatal(err)
	}
}

// handshake dials and reads the server's SETTINGS and first WINDOW_UPDATE,
// and acknowledges the SETTINGS.
func handshake(t *testing.T, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	rc := dialRaw(t, addr, settings...)
	f := rc.read()
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	if err := rc.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return rc
}

func (rc *rawClient) read() http2.Frame {
	rc.t.Helper()
	f, err := rc.next()
	if err != nil {
		rc.t.Fatalf("reading a frame: %v", err)
	}
	return f
}

func (rc *rawClient) next() (http2.Frame, error) {
	rc.nc.SetReadDeadline(time.Now().Add(failsafe))
	return rc.fr.ReadFrame()
}

// block encodes fields given as name, value pairs.
func (rc *rawClient) block(kv ...string) []byte {
	rc.ebuf.Reset()
	for i := 0; i < len(kv); i += 2 {
		rc.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return append([]byte(nil), rc.ebuf.Bytes()...)
}

var getReq = []string{":method", "GET", ":scheme", "http", ":path", "/", ":authority", "x"}
var postReq = []string{":method", "POST", ":scheme", "http", ":path", "/", ":authority", "x"}

func (rc *rawClient) headers(id uint32, end bool, kv ...string) {
	rc.t.Helper()
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: id, BlockFragment: rc.block(kv...), EndStream: end, EndHeaders: true,
	}); err != nil {
		rc.t.Fatal(err)
	}
}

// until reads frames until one satisfies ok, skipping the others; it fails
// the test when the connection ends first.
func (rc *rawClient) until(what string, ok func(http2.Frame) bool) http2.Frame {
	rc.t.Helper()
	for {
		f, err := rc.next()
		if err != nil {
			rc.t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok(f) {
			return f
		}
	}
}

// wantGoAway reads until a GOAWAY, checks its code, then expects the
// connection to close.
func (rc *rawClient) wantGoAway(code http2.ErrCode) *http2.GoAwayFrame {
	rc.t.Helper()
	f := rc.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	ga := f.(*http2.GoAwayFrame)
	if ga.ErrCode != code {
		rc.t.Fatalf("GOAWAY %v (%q), want %v", ga.ErrCode, ga.DebugData(), code)
	}
	rc.wantClosed()
	return ga
}

func (rc *rawClient) wantClosed() {
	rc.t.Helper()
	for {
		_, err := rc.next()
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			rc.t.Fatal("connection not closed")
		}
		return
	}
}

func (rc *rawClient) wantRST(id uint32, code http2.ErrCode) {
	rc.t.Helper()
	f := rc.until("RST_STREAM", func(f http2.Frame) bool {
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			rc.t.Fatalf("GOAWAY %v (%q), want RST_STREAM", ga.ErrCode, ga.DebugData())
		}
		_, ok := f.(*http2.RSTStreamFrame)
		return ok
	})
	if rst := f.(*http2.RSTStreamFrame); rst.StreamID != id || rst.ErrCode != code {
		rc.t.Fatalf("RST_STREAM %d %v, want %d %v", rst.StreamID, rst.ErrCode, id, code)
	}
}

// wantResponse reads the response of stream id to its end and returns its
// status and body.
func (rc *rawClient) wantResponse(id uint32) (status string, body []byte) {
	rc.t.Helper()
	for {
		f := rc.read()
		if f.Header().StreamID != id {
			continue
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" {
				status = s
			}
			if f.StreamEnded() {
				return status, body
			}
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				return status, body
			}
		case *http2.RSTStreamFrame:
			rc.t.Fatalf("stream %d reset: %v", id, f.ErrCode)
		case *http2.GoAwayFrame:
			rc.t.Fatalf("GOAWAY %v (%q)", f.ErrCode, f.DebugData())
		}
	}
}

// ok answers 200 "ok" without reading the body.
func ok(st *Stream) {
	st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"}}, []byte("ok"), true)
}

// TestProtocolErrors sends what RFC 9113 forbids and checks the answer: a
// connection error (GOAWAY with the code, then close) or a stream error
// (RST_STREAM with the code, and the connection still serving).
func TestProtocolErrors(t *testing.T) {
	hold := func(st *Stream) { <-st.Done() }
	tests := []struct {
		name   string
		h      Handler
		send   func(rc *rawClient)
		conn   http2.ErrCode // GOAWAY code expected; or
		stream uint32        // RST_STREAM expected on this stream with code
		code   http2.ErrCode
	}{
		{name: "ENABLE_PUSH 2", send: func(rc *rawClient) {
			rc.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 2})
		}, conn: http2.ErrCodeProtocol},
		{name: "MAX_FRAME_SIZE too small", send: func(rc *rawClient) {
			rc.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 100})
		}, conn: http2.ErrCodeProtocol},
		{name: "INITIAL_WINDOW_SIZE over 2^31-1", send: func(rc *rawClient) {
			rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
		}, conn: http2.ErrCodeFlowControl},
		{name: "SETTINGS ACK with payload", send: func(rc *rawClient) {
			rc.fr.WriteRawFrame(http2.FrameSettings, http2.FlagSettingsAck, 0, make([]byte, 6))
		}, conn: http2.ErrCodeFrameSize},
		{name: "even stream id", send: func(rc *rawClient) { rc.headers(2, true, getReq...) }, conn: http2.ErrCodeProtocol},
		{name: "decreasing stream id", h: hold, send: func(rc *rawClient) {
			rc.headers(5, true, getReq...)
			rc.headers(3, true, getReq...)
		}, conn: http2.ErrCodeProtocol},
		{name: "DATA on idle stream", send: func(rc *rawClient) { rc.fr.WriteData(1, true, []byte("x")) }, conn: http2.ErrCodeProtocol},
		{name: "RST_STREAM on idle stream", send: func(rc *rawClient) { rc.fr.WriteRSTStream(1, http2.ErrCodeCancel) }, conn: http2.ErrCodeProtocol},
		{name: "WINDOW_UPDATE on idle stream", send: func(rc *rawClient) { rc.fr.WriteWindowUpdate(1, 1) }, conn: http2.ErrCodeProtocol},
		{name: "DATA on half-closed (remote)", h: hold, send: func(rc *rawClient) {
			rc.headers(1, true, getReq...)
			rc.fr.WriteData(1, true, []byte("x"))
		}, stream: 1, code: http2.ErrCodeStreamClosed},
		{name: "HEADERS on half-closed (remote)", h: hold, send: func(rc *rawClient) {
			rc.headers(1, true, getReq...)
			rc.headers(1, true, "x-trailer", "1")
		}, stream: 1, code: http2.ErrCodeStreamClosed},
		{name: "DATA on closed stream", h: ok, send: func(rc *rawClient) {
			rc.headers(1, true, getReq...)
			rc.wantResponse(1)
			rc.fr.WriteData(1, true, []byte("x"))
		}, stream: 1, code: http2.ErrCodeStreamClosed},
		{name: "HEADERS on closed stream", h: ok, send: func(rc *rawClient) {
			rc.headers(1, true, getReq...)
			rc.wantResponse(1)
			rc.headers(1, true, getReq...)
		}, conn: http2.ErrCodeStreamClosed},
		{name: "PRIORITY on itself", h: hold, send: func(rc *rawClient) {
			rc.headers(1, false, postReq...)
			rc.fr.WritePriority(1, http2.PriorityParam{StreamDep: 1, Weight: 15})
		}, stream: 1, code: http2.ErrCodeProtocol},
		{name: "HEADERS depending on itself", send: func(rc *rawClient) {
			rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.block(getReq...),
				EndStream: true, EndHeaders: true, Priority: http2.PriorityParam{StreamDep: 1, Weight: 1}})
		}, stream: 1, code: http2.ErrCodeProtocol},
		{name: "zero WINDOW_UPDATE on the connection", send: func(rc *rawClient) { rc.fr.WriteWindowUpdate(0, 0) }, conn: http2.ErrCodeProtocol},
		{name: "zero WINDOW_UPDATE on a stream", h: hold, send: func(rc *rawClient) {
			rc.headers(1, true, getReq...)
			rc.fr.WriteWindowUpdate(1, 0)
		}, stream: 1, code: http2.ErrCodeProtocol},
		{name: "connection window over 2^31-1", send: func(rc *rawClient) { rc.fr.WriteWindowUpdate(0, 1<<31-1) }, conn: http2.ErrCodeFlowControl},
		{name: "stream window over 2^31-1", h: hold, send: func(rc *rawClient) {
			rc.headers(1, true, getReq...)
			rc.fr.WriteWindowUpdate(1, 1<<31-1)
		}, stream: 1, code: http2.ErrCodeFlowControl},
		{name: "stream receive window exceeded", h: hold, send: func(rc *rawClient) {
			rc.headers(1, false, postReq...)
			chunk := make([]byte, 16384)
			for i := 0; i < 5; i++ { // 80 KiB > the 64 KiB window of this test
				rc.fr.WriteData(1, false, chunk)
			}
		}, stream: 1, code: http2.ErrCodeFlowControl},
		{name: "content-length exceeded", h: hold, send: func(rc *rawClient) {
			rc.headers(1, false, append(postReq, "content-length", "3")...)
			rc.fr.WriteData(1, true, []byte("four"))
		}, stream: 1, code: http2.ErrCodeProtocol},
		{name: "content-length not reached", h: hold, send: func(rc *rawClient) {
			rc.headers(1, false, append(postReq, "content-length", "5")...)
			rc.fr.WriteData(1, true, []byte("four"))
		}, stream: 1, code: http2.ErrCodeProtocol},
		{name: "trailers without END_STREAM", h: hold, send: func(rc *rawClient) {
			rc.headers(1, false, postReq...)
			rc.headers(1, false, "x-t", "1")
		}, stream: 1, code: http2.ErrCodeProtocol},
		{name: "pseudo-header in trailers", h: hold, send: func(rc *rawClient) {
			rc.headers(1, false, postReq...)
			rc.headers(1, true, ":path", "/")
		}, stream: 1, code: http2.ErrCodeProtocol},
		{name: "malformed request", send: func(rc *rawClient) {
			rc.headers(1, true, append(getReq, "connection", "close")...)
		}, stream: 1, code: http2.ErrCodeProtocol},
		{name: "frame over MaxFrameSize", send: func(rc *rawClient) {
			rc.headers(1, false, postReq...)
			rc.fr.WriteData(1, false, make([]byte, 16385))
		}, conn: http2.ErrCodeFrameSize},
		{name: "CONTINUATION without HEADERS", send: func(rc *rawClient) {
			rc.fr.WriteContinuation(1, true, rc.block(getReq...))
		}, conn: http2.ErrCodeProtocol},
		{name: "frame inside a header block", send: func(rc *rawClient) {
			rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.block(getReq...), EndStream: true})
			rc.fr.WritePing(false, [8]byte{})
		}, conn: http2.ErrCodeProtocol},
		{name: "PUSH_PROMISE", send: func(rc *rawClient) {
			rc.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: rc.block(getReq...), EndHeaders: true})
		}, conn: http2.ErrCodeProtocol},
		{name: "HPACK garbage", send: func(rc *rawClient) {
			rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		}, conn: http2.ErrCodeCompression},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := func(st *Stream) {
				if tt.h == nil || st.ID() == 101 {
					ok(st)
					return
				}
				tt.h(st)
			}
			ts := newTestServer(t, &Settings{InitialWindow: 65535}, h)
			rc := handshake(t, ts.addr())
			tt.send(rc)
			if tt.stream != 0 {
				rc.wantRST(tt.stream, tt.code)
				// The connection goes on serving.
				rc.headers(101, true, getReq...)
				if s, _ := rc.wantResponse(101); s != "200" {
					t.Fatalf("after the stream error: status %q", s)
				}
				return
			}
			rc.wantGoAway(tt.conn)
		})
	}
}

func TestFirstFrameMustBeSettings(t *testing.T) {
	ts := newTestServer(t, nil, ok)
	nc, err := net.Dial("tcp", ts.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rc := &rawClient{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	io.WriteString(nc, http2.ClientPreface)
	rc.fr.WritePing(false, [8]byte{})
	rc.wantGoAway(http2.ErrCodeProtocol)
}

// TestPrefix: the preface may come partly or wholly in the bytes the caller
// already read.
func TestPrefix(t *testing.T) {
	for _, split := range []int{0, 5, len(http2.ClientPreface), len(http2.ClientPreface) + 9} {
		cn, sn := net.Pipe()
		var buf bytes.Buffer
		buf.WriteString(http2.ClientPreface)
		fr := http2.NewFramer(&buf, nil)
		fr.WriteSettings()
		all := buf.Bytes()
		done := make(chan error, 1)
		go func() { done <- ServeConn(sn, all[:split], nil, ok) }()
		go func() { cn.Write(all[split:]) }()
		cfr := http2.NewFramer(cn, cn)
		cn.SetReadDeadline(time.Now().Add(failsafe))
		f, err := cfr.ReadFrame()
		if err != nil {
			t.Fatalf("split %d: %v", split, err)
		}
		if _, ok := f.(*http2.SettingsFrame); !ok {
			t.Fatalf("split %d: got %v", split, f)
		}
		// Our SETTINGS is acknowledged only once the client's was read
		// whole, prefix and connection together.
		for {
			f, err := cfr.ReadFrame()
			if err != nil {
				t.Fatalf("split %d: %v", split, err)
			}
			if sf, ok := f.(*http2.SettingsFrame); ok && sf.IsAck() {
				break
			}
		}
		cn.Close()
		if err := <-done; err != nil {
			t.Fatalf("split %d: Serve: %v", split, err)
		}
	}
}

func TestBadPreface(t *testing.T) {
	cn, sn := net.Pipe()
	defer cn.Close()
	go io.WriteString(cn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	err := ServeConn(sn, nil, nil, ok)
	var ce *ConnError
	if !errors.As(err, &ce) || ce.Code != http2.ErrCodeProtocol {
		t.Fatalf("got %v", err)
	}
}

// TestAwaitBody checks what a handler learns of a request whose header
// block did not end the stream: END_STREAM alone (no body), DATA, trailers
// without DATA, or nothing before the deadline. The client sends what
// follows the head once the handler is about to wait, so that the wait
// is what sees it come (or, by a hair, the call finds it there).
func TestAwaitBody(t *testing.T) {
	tests := []struct {
		name     string
		then     func(rc *rawClient) // nil: nothing until the deadline
		deadline time.Duration
		want     bool
	}{
		{"END_STREAM alone", func(rc *rawClient) { rc.fr.WriteData(1, true, nil) }, time.Minute, true},
		{"DATA", func(rc *rawClient) { rc.fr.WriteData(1, true, []byte("x")) }, time.Minute, false},
		{"empty DATA, then more", func(rc *rawClient) { rc.fr.WriteData(1, false, nil); rc.fr.WriteData(1, true, []byte("x")) }, time.Minute, false},
		{"trailers", func(rc *rawClient) { rc.headers(1, true, "x-t", "1") }, time.Minute, false},
		{"nothing", nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			waiting := make(chan struct{})
			got := make(chan bool, 1)
			ts := newTestServer(t, nil, func(st *Stream) {
				close(waiting)
				got <- st.AwaitBody(time.Now().Add(tt.deadline))
				io.Copy(io.Discard, st)
				ok(st)
			})
			rc := handshake(t, ts.addr())
			rc.headers(1, false, getReq...)
			<-waiting
			if tt.then != nil {
				tt.then(rc)
			}
			if g := <-got; g != tt.want {
				t.Errorf("AwaitBody = %v, want %v", g, tt.want)
			}
			if tt.then == nil {
				rc.fr.WriteData(1, true, nil)
			}
			if status, _ := rc.wantResponse(1); status != "200" {
				t.Errorf("status %q", status)
			}
		})
	}
}
