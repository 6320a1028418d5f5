package h2

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawUpstream connects a ClientConn to a server end driven frame by frame
// (a rawClient on the accepted conn), for what a well-behaved server cannot
// produce. It reads the client preface and the client's SETTINGS; with
// settings set it sends SETTINGS (with ss) first.
func rawUpstream(t *testing.T, s *ClientSettings, settings bool, ss ...http2.Setting) (*ClientConn, *rawClient) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	cc := NewClientConn(nc, s)
	t.Cleanup(func() { cc.Close(); <-cc.Done() })
	rc := &rawClient{t: t, nc: sc, fr: http2.NewFramer(sc, sc)}
	rc.fr.AllowIllegalWrites = true
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.fr.MaxHeaderListSize = 1 << 20
	rc.enc = hpack.NewEncoder(&rc.ebuf)
	sc.SetReadDeadline(time.Now().Add(failsafe))
	pre := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(sc, pre); err != nil || string(pre) != http2.ClientPreface {
		t.Fatalf("client preface %q, %v", pre, err)
	}
	if settings {
		if err := rc.fr.WriteSettings(ss...); err != nil {
			t.Fatal(err)
		}
	}
	f := rc.read()
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("client's first frame %v, want SETTINGS", f)
	}
	if v, ok := sf.Value(http2.SettingEnablePush); !ok || v != 0 {
		t.Fatalf("client SETTINGS without ENABLE_PUSH 0: %v", sf)
	}
	return cc, rc
}

// wantHeaders reads until the HEADERS of stream id.
func (rc *rawClient) wantHeaders(id uint32) *http2.MetaHeadersFrame {
	rc.t.Helper()
	f := rc.until("HEADERS", func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		return ok && h.StreamID == id
	})
	return f.(*http2.MetaHeadersFrame)
}

// sync sends a PING and reads until its acknowledgement: the client has
// processed every frame sent before. It returns the DATA payload bytes read
// meanwhile, by stream.
func (rc *rawClient) sync() map[uint32]int {
	rc.t.Helper()
	data := map[uint32]int{}
	if err := rc.fr.WritePing(false, [8]byte{'s', 'y', 'n', 'c'}); err != nil {
		rc.t.Fatal(err)
	}
	rc.until("PING ack", func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok {
			data[d.StreamID] += len(d.Data())
		}
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck() && p.Data == [8]byte{'s', 'y', 'n', 'c'}
	})
	return data
}

func (rc *rawClient) respond(id uint32, body string) {
	rc.t.Helper()
	rc.headers(id, body == "", ":status", "200")
	if body != "" {
		if err := rc.fr.WriteData(id, true, []byte(body)); err != nil {
			rc.t.Fatal(err)
		}
	}
}

func open(t *testing.T, cc *ClientConn, end bool) *ClientStream {
	t.Helper()
	cs, err := cc.OpenStream(request("GET", "/"), end)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestClientNotProcessed: what the server does to a stream after its HEADERS,
// and whether the error proves the request was not processed (RFC 9113 §8.7).
func TestClientNotProcessed(t *testing.T) {
	tests := []struct {
		name         string
		server       func(rc *rawClient)
		notProcessed bool
		check        func(t *testing.T, err error)
	}{
		{"REFUSED_STREAM", func(rc *rawClient) { rc.fr.WriteRSTStream(1, http2.ErrCodeRefusedStream) }, true,
			func(t *testing.T, err error) {
				var re *ResetError
				if !errors.As(err, &re) || !re.Remote || re.Code != http2.ErrCodeRefusedStream {
					t.Fatalf("%v", err)
				}
			}},
		{"REFUSED_STREAM after HEADERS", func(rc *rawClient) {
			rc.headers(1, false, ":status", "200")
			rc.fr.WriteRSTStream(1, http2.ErrCodeRefusedStream)
		}, false, nil},
		{"GOAWAY below after HEADERS", func(rc *rawClient) {
			rc.headers(1, false, ":status", "200")
			rc.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		}, false, nil},
		{"CANCEL", func(rc *rawClient) { rc.fr.WriteRSTStream(1, http2.ErrCodeCancel) }, false, nil},
		{"PROTOCOL_ERROR", func(rc *rawClient) { rc.fr.WriteRSTStream(1, http2.ErrCodeProtocol) }, false, nil},
		{"reset after HEADERS", func(rc *rawClient) {
			rc.headers(1, false, ":status", "200")
			rc.fr.WriteRSTStream(1, http2.ErrCodeInternal)
		}, false, nil},
		{"cut after HEADERS", func(rc *rawClient) { rc.nc.Close() }, false,
			func(t *testing.T, err error) {
				if !errors.Is(err, ErrConnClosed) {
					t.Fatalf("%v, want ErrConnClosed", err)
				}
			}},
		{"cut in the body", func(rc *rawClient) {
			rc.headers(1, false, ":status", "200")
			rc.fr.WriteData(1, false, []byte("part"))
			rc.nc.Close()
		}, false, nil},
		{"graceful GOAWAY below", func(rc *rawClient) { rc.fr.WriteGoAway(0, http2.ErrCodeNo, []byte("deploy")) }, true,
			func(t *testing.T, err error) {
				var ga *GoAwayError
				if !errors.As(err, &ga) || !ga.Graceful() || ga.StreamID != 1 || ga.LastStreamID != 0 || ga.Debug != "deploy" {
					t.Fatalf("%#v", err)
				}
			}},
		{"failing GOAWAY below", func(rc *rawClient) { rc.fr.WriteGoAway(0, http2.ErrCodeInternal, nil) }, true,
			func(t *testing.T, err error) {
				var ga *GoAwayError
				if !errors.As(err, &ga) || ga.Graceful() {
					t.Fatalf("%v", err)
				}
			}},
		{"GOAWAY covering it, then cut", func(rc *rawClient) {
			rc.fr.WriteGoAway(1, http2.ErrCodeNo, nil)
			rc.nc.Close()
		}, false,
			func(t *testing.T, err error) {
				var ga *GoAwayError
				if !errors.As(err, &ga) || ga.StreamID != 1 || ga.LastStreamID != 1 || !errors.Is(err, ErrConnClosed) {
					t.Fatalf("%v", err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc, rc := rawUpstream(t, nil, true)
			cs := open(t, cc, true)
			rc.wantHeaders(1)
			tt.server(rc)
			_, err := readResponse(cs)
			if err == nil {
				t.Fatal("no error")
			}
			if got := NotProcessed(err); got != tt.notProcessed {
				t.Fatalf("NotProcessed(%v) = %v, want %v", err, got, tt.notProcessed)
			}
			if tt.check != nil {
				tt.check(t, err)
			}
		})
	}
}

// TestClientGoAway: streams above a GOAWAY's last id fail, not processed;
// those at or below finish; a later GOAWAY lowers the id, never raises it;
// no new stream; the connection closes once the last stream ends.
func TestClientGoAway(t *testing.T) {
	cc, rc := rawUpstream(t, nil, true)
	var streams []*ClientStream
	for range 4 {
		streams = append(streams, open(t, cc, true)) // 1, 3, 5, 7
	}
	rc.wantHeaders(7)

	// The first of a graceful pair: nothing fails.
	rc.fr.WriteGoAway(maxStreamID, http2.ErrCodeNo, nil)
	rc.sync()
	if n := cc.Active(); n != 4 {
		t.Fatalf("%d active after GOAWAY(2^31-1), want 4", n)
	}
	if cc.Available() != 0 {
		t.Fatal("streams available after GOAWAY")
	}
	if _, err := cc.OpenStream(request("GET", "/"), true); !errors.Is(err, ErrGoingAway) || !NotProcessed(err) {
		t.Fatalf("OpenStream after GOAWAY: %v", err)
	}

	rc.fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	rc.fr.WriteGoAway(5, http2.ErrCodeNo, nil) // an increase: ignored
	rc.sync()
	for _, cs := range streams[2:] {
		_, err := cs.ReadHeader()
		var ga *GoAwayError
		if !NotProcessed(err) || !errors.As(err, &ga) || !ga.Graceful() || ga.LastStreamID != 3 {
			t.Fatalf("stream %d: %v, want not processed", cs.ID(), err)
		}
	}
	var ga *GoAwayError
	if err := cc.Err(); !errors.As(err, &ga) || ga.LastStreamID != 3 || !ga.Graceful() {
		t.Fatalf("Err %v", err)
	}
	rc.respond(1, "one")
	rc.respond(3, "three")
	for i, want := range []string{"one", "three"} {
		r, err := readResponse(streams[i])
		if err != nil || string(r.body) != want {
			t.Fatalf("stream %d: %v %q", streams[i].ID(), err, r.body)
		}
	}
	<-cc.Done()
	rc.wantClosed()
}

// TestClientNoServerSettings: before the server's SETTINGS the client opens
// up to 100 streams and sends up to 65535 bytes (RFC 9113 §6.5.2, §6.9.2),
// and goes on once the server speaks.
func TestClientNoServerSettings(t *testing.T) {
	cc, rc := rawUpstream(t, nil, false)
	if a := cc.Available(); a != initialMaxStreams {
		t.Fatalf("Available %d before SETTINGS, want %d", a, initialMaxStreams)
	}
	cs, err := cc.OpenStream(request("POST", "/"), false)
	if err != nil {
		t.Fatal(err)
	}
	for range initialMaxStreams - 1 {
		open(t, cc, true)
	}
	if _, err := cc.OpenStream(request("GET", "/"), true); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("stream 101: %v", err)
	}
	body := make([]byte, 100000)
	werr := make(chan error, 1)
	go func() {
		cs.SetWriteDeadline(time.Now().Add(failsafe))
		_, err := cs.Write(body)
		if err == nil {
			err = cs.CloseSend()
		}
		werr <- err
	}()
	sent := 0
	rc.until("65535 bytes", func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
			sent += len(d.Data())
		}
		return sent >= defaultWindow
	})
	// Late SETTINGS, with more window: whatever arrives before its
	// acknowledgement was sent on the initial window.
	rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	rc.fr.WriteWindowUpdate(0, 1<<20)
	rc.until("SETTINGS ack", func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
			sent += len(d.Data())
		}
		s, ok := f.(*http2.SettingsFrame)
		return ok && s.IsAck()
	})
	if sent != defaultWindow {
		t.Fatalf("%d bytes sent on the initial window, want %d", sent, defaultWindow)
	}
	rc.until("END_STREAM", func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		if ok && d.StreamID == 1 {
			sent += len(d.Data())
		}
		return ok && d.StreamID == 1 && d.StreamEnded()
	})
	if err := <-werr; err != nil || sent != len(body) {
		t.Fatalf("body: %v, %d bytes", err, sent)
	}
	rc.respond(1, "done")
	if r, err := readResponse(cs); err != nil || string(r.body) != "done" {
		t.Fatalf("response: %v", err)
	}
	if a := cc.Available(); a != unlimitedStreams-(initialMaxStreams-1) {
		t.Fatalf("Available %d after SETTINGS without a stream limit", a)
	}
}

// TestClientWindowSettings: SETTINGS_INITIAL_WINDOW_SIZE changes apply to
// open streams (RFC 9113 §6.9.2), and WINDOW_UPDATE adds to them.
func TestClientWindowSettings(t *testing.T) {
	cc, rc := rawUpstream(t, nil, true, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	rc.sync() // the client has the SETTINGS
	cs := open(t, cc, false)
	werr := make(chan error, 1)
	go func() {
		cs.SetWriteDeadline(time.Now().Add(failsafe))
		_, err := cs.Write(make([]byte, 100))
		werr <- err
	}()
	steps := []struct {
		grant func()
		total int
	}{
		{func() {}, 10},
		{func() { rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 30}) }, 30},
		{func() { rc.fr.WriteWindowUpdate(1, 70) }, 100},
	}
	sent := 0
	for _, s := range steps {
		s.grant()
		rc.until("DATA", func(f http2.Frame) bool {
			if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
				sent += len(d.Data())
			}
			return sent >= s.total
		})
		// Nothing more before the client has seen the next frame.
		for id, n := range rc.sync() {
			if id == 1 {
				sent += n
			}
		}
		if sent != s.total {
			t.Fatalf("%d bytes sent, window allows %d", sent, s.total)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
}

// TestClientUpstreamErrors: protocol errors from the server side. A stream
// error resets the stream (RST_STREAM with the code, a *ResetError from this
// side) and leaves the connection usable; a connection error sends GOAWAY
// with the code and closes, and the stream's error is a *ConnError that
// matches ErrConnClosed. Neither is NotProcessed.
func TestClientUpstreamErrors(t *testing.T) {
	small := &ClientSettings{MaxHeaderList: 1024}
	wide := &ClientSettings{InitialWindow: 65535, ConnWindow: 1 << 20}
	big := string(make([]byte, 400))
	tests := []struct {
		name    string
		s       *ClientSettings
		server  func(rc *rawClient)
		code    http2.ErrCode
		connErr bool
		// settle: the client processes the server's frames before the
		// test reads, so that a reader's WINDOW_UPDATE cannot make room.
		// complete: the response ended before the error; only the
		// RST_STREAM shows it.
		settle, complete bool
	}{
		{"bad :status", nil, func(rc *rawClient) { rc.headers(1, true, ":status", "2000") }, http2.ErrCodeProtocol, false, false, false},
		{"non-digit :status", nil, func(rc *rawClient) { rc.headers(1, true, ":status", "2x0") }, http2.ErrCodeProtocol, false, false, false},
		{"missing :status", nil, func(rc *rawClient) { rc.headers(1, true, "content-type", "text/plain") }, http2.ErrCodeProtocol, false, false, false},
		{"101", nil, func(rc *rawClient) { rc.headers(1, false, ":status", "101") }, http2.ErrCodeProtocol, false, false, false},
		{"duplicate :status", nil, func(rc *rawClient) { rc.headers(1, true, ":status", "200", ":status", "204") }, http2.ErrCodeProtocol, false, false, false},
		{"request pseudo field", nil, func(rc *rawClient) { rc.headers(1, true, ":status", "200", ":path", "/") }, http2.ErrCodeProtocol, false, false, false},
		{"pseudo after regular", nil, func(rc *rawClient) { rc.headers(1, true, "x", "1", ":status", "200") }, http2.ErrCodeProtocol, false, false, false},
		{"connection field", nil, func(rc *rawClient) { rc.headers(1, true, ":status", "200", "connection", "close") }, http2.ErrCodeProtocol, false, false, false},
		{"transfer-encoding", nil, func(rc *rawClient) { rc.headers(1, false, ":status", "200", "transfer-encoding", "chunked") }, http2.ErrCodeProtocol, false, false, false},
		{"te", nil, func(rc *rawClient) { rc.headers(1, true, ":status", "200", "te", "trailers") }, http2.ErrCodeProtocol, false, false, false},
		{"uppercase name", nil, func(rc *rawClient) { rc.headers(1, true, ":status", "200", "X-Up", "1") }, http2.ErrCodeProtocol, false, false, false},
		{"LF in a value", nil, func(rc *rawClient) { rc.headers(1, true, ":status", "200", "x", "a\nb") }, http2.ErrCodeProtocol, false, false, false},
		{"interim with END_STREAM", nil, func(rc *rawClient) { rc.headers(1, true, ":status", "103") }, http2.ErrCodeProtocol, false, false, false},
		{"trailers with pseudo", nil, func(rc *rawClient) {
			rc.headers(1, false, ":status", "200")
			rc.headers(1, true, ":status", "200")
		}, http2.ErrCodeProtocol, false, false, false},
		{"trailers without END_STREAM", nil, func(rc *rawClient) {
			rc.headers(1, false, ":status", "200")
			rc.headers(1, false, "x", "1")
		}, http2.ErrCodeProtocol, false, false, false},
		{"DATA before HEADERS", nil, func(rc *rawClient) { rc.fr.WriteData(1, true, []byte("x")) }, http2.ErrCodeProtocol, false, false, false},
		{"DATA beyond content-length", nil, func(rc *rawClient) {
			rc.headers(1, false, ":status", "200", "content-length", "2")
			rc.fr.WriteData(1, true, []byte("abc"))
		}, http2.ErrCodeProtocol, false, false, false},
		{"DATA short of content-length", nil, func(rc *rawClient) {
			rc.headers(1, false, ":status", "200", "content-length", "5")
			rc.fr.WriteData(1, true, []byte("abc"))
		}, http2.ErrCodeProtocol, false, false, false},
		{"content in a 204", nil, func(rc *rawClient) {
			rc.headers(1, false, ":status", "204")
			rc.fr.WriteData(1, true, []byte("abc"))
		}, http2.ErrCodeProtocol, false, false, false},
		{"DATA after END_STREAM", nil, func(rc *rawClient) {
			rc.headers(1, true, ":status", "200")
			rc.fr.WriteData(1, true, []byte("abc"))
		}, http2.ErrCodeStreamClosed, false, false, true},
		{"header list too large", small, func(rc *rawClient) {
			rc.headers(1, true, ":status", "200", "a", big, "b", big, "c", big)
		}, http2.ErrCodeProtocol, false, false, false},
		{"DATA past the stream window", wide, func(rc *rawClient) {
			rc.headers(1, false, ":status", "200")
			for range 5 {
				rc.fr.WriteData(1, false, make([]byte, 16384))
			}
		}, http2.ErrCodeFlowControl, false, true, false},
		{"too many interim blocks", nil, func(rc *rawClient) {
			for range maxInterim + 1 {
				rc.headers(1, false, ":status", "103")
			}
		}, http2.ErrCodeProtocol, false, false, false},

		{"DATA past the connection window", &ClientSettings{ConnWindow: 65535}, func(rc *rawClient) {
			rc.headers(1, false, ":status", "200")
			for range 5 {
				rc.fr.WriteData(1, false, make([]byte, 16384))
			}
		}, http2.ErrCodeFlowControl, true, true, false},
		{"PUSH_PROMISE", nil, func(rc *rawClient) {
			rc.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: rc.block(getReq...), EndHeaders: true})
		}, http2.ErrCodeProtocol, true, false, false},
		{"CONTINUATION flood", nil, func(rc *rawClient) {
			rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.block(":status", "200")})
			for range 1000 {
				if rc.fr.WriteContinuation(1, false, nil) != nil {
					return
				}
			}
		}, http2.ErrCodeEnhanceYourCalm, true, false, false},
		{"HEADERS on an even stream", nil, func(rc *rawClient) { rc.headers(2, true, ":status", "200") }, http2.ErrCodeProtocol, true, false, false},
		{"HEADERS on an idle stream", nil, func(rc *rawClient) { rc.headers(3, true, ":status", "200") }, http2.ErrCodeProtocol, true, false, false},
		{"RST_STREAM on an idle stream", nil, func(rc *rawClient) { rc.fr.WriteRSTStream(5, http2.ErrCodeCancel) }, http2.ErrCodeProtocol, true, false, false},
		{"DATA on an idle stream", nil, func(rc *rawClient) { rc.fr.WriteData(9, true, []byte("x")) }, http2.ErrCodeProtocol, true, false, false},
		{"ENABLE_PUSH 1", nil, func(rc *rawClient) {
			rc.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 1})
		}, http2.ErrCodeProtocol, true, false, false},
		{"window over 2^31-1", nil, func(rc *rawClient) { rc.fr.WriteWindowUpdate(0, maxWindow) }, http2.ErrCodeFlowControl, true, false, false},
		{"SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1", nil, func(rc *rawClient) {
			rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
		}, http2.ErrCodeFlowControl, true, false, false},
		{"HPACK garbage", nil, func(rc *rawClient) {
			rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		}, http2.ErrCodeCompression, true, false, false},
		{"PING flood", nil, func(rc *rawClient) {
			for i := range 12000 {
				if rc.fr.WritePing(false, [8]byte{byte(i)}) != nil {
					return
				}
			}
		}, http2.ErrCodeEnhanceYourCalm, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc, rc := rawUpstream(t, tt.s, true)
			cs := open(t, cc, false) // half-closed (remote) after a response's END_STREAM
			rc.wantHeaders(1)
			tt.server(rc)
			var rst *http2.RSTStreamFrame
			var ga *http2.GoAwayFrame
			if tt.settle {
				rc.fr.WritePing(false, [8]byte{'s', 'e', 't', 't', 'l', 'e'})
				rc.until("PING ack or GOAWAY", func(f http2.Frame) bool {
					switch f := f.(type) {
					case *http2.RSTStreamFrame:
						rst = f
					case *http2.GoAwayFrame:
						ga = f
						return true
					case *http2.PingFrame:
						return f.IsAck()
					}
					return false
				})
			}
			_, err := readResponse(cs)
			if tt.complete {
				if err != nil {
					t.Fatalf("complete response: %v", err)
				}
				rc.wantRST(1, tt.code)
				return
			}
			if NotProcessed(err) {
				t.Errorf("NotProcessed(%v)", err)
			}
			if tt.connErr {
				var ce *ConnError
				if !errors.As(err, &ce) || ce.Code != tt.code || !errors.Is(err, ErrConnClosed) {
					t.Fatalf("stream error %v, want a connection error %v", err, tt.code)
				}
				if ga == nil {
					rc.wantGoAway(tt.code)
				} else if ga.ErrCode != tt.code {
					t.Fatalf("GOAWAY %v", ga.ErrCode)
				}
				rc.nc.Close() // ends the client's linger
				<-cc.Done()
				return
			}
			var re *ResetError
			if !errors.As(err, &re) || re.Remote || re.Code != tt.code {
				t.Fatalf("got %v, want a reset %v from this side", err, tt.code)
			}
			if rst == nil {
				rc.wantRST(1, tt.code)
			} else if rst.StreamID != 1 || rst.ErrCode != tt.code {
				t.Fatalf("RST_STREAM %d %v", rst.StreamID, rst.ErrCode)
			}
			if cc.Err() != nil {
				t.Fatalf("connection unusable after a stream error: %v", cc.Err())
			}
			cs2 := open(t, cc, true)
			rc.wantHeaders(cs2.ID())
			rc.respond(cs2.ID(), "next")
			if r, err := readResponse(cs2); err != nil || string(r.body) != "next" {
				t.Fatalf("next stream: %v", err)
			}
		})
	}
}

// TestClientFirstFrameNotSettings: §3.4, the server preface is SETTINGS.
func TestClientFirstFrameNotSettings(t *testing.T) {
	cc, rc := rawUpstream(t, nil, false)
	cs := open(t, cc, true)
	rc.fr.WritePing(false, [8]byte{})
	rc.wantGoAway(http2.ErrCodeProtocol)
	_, err := cs.ReadHeader()
	var ce *ConnError
	if !errors.As(err, &ce) || NotProcessed(err) {
		t.Fatalf("got %v", err)
	}
}

// TestClientPingAndAcks: Ping measures a round trip; the server's SETTINGS
// and PINGs are acknowledged.
func TestClientPingAndAcks(t *testing.T) {
	cc, rc := rawUpstream(t, nil, true)
	rc.until("SETTINGS ack", func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })
	rc.fr.WritePing(false, [8]byte{7})
	rc.until("PING ack", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck() && p.Data == [8]byte{7}
	})
	done := make(chan error, 1)
	go func() { done <- cc.Ping(context.Background()) }()
	p := rc.until("PING", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && !p.IsAck() }).(*http2.PingFrame)
	rc.fr.WritePing(true, p.Data)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := cc.Ping(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ping with a cancelled context: %v", err)
	}
}

// TestClientResetSends: Reset sends RST_STREAM once; DATA in flight after
// it is dropped and its window given back.
func TestClientResetSends(t *testing.T) {
	cc, rc := rawUpstream(t, &ClientSettings{ConnWindow: 65535, InitialWindow: 65535}, true)
	cs := open(t, cc, true)
	rc.wantHeaders(1)
	rc.headers(1, false, ":status", "200")
	rc.sync()
	cs.Reset(http2.ErrCodeCancel)
	cs.Reset(http2.ErrCodeInternal)
	rc.wantRST(1, http2.ErrCodeCancel)
	// In flight: a whole connection window on the reset stream. Without
	// the window given back the next response could not arrive.
	for range 4 {
		rc.fr.WriteData(1, false, make([]byte, 16383))
	}
	rc.fr.WriteData(1, true, make([]byte, 3))
	rc.until("WINDOW_UPDATE", func(f http2.Frame) bool { w, ok := f.(*http2.WindowUpdateFrame); return ok && w.StreamID == 0 })
	cs2 := open(t, cc, true)
	rc.wantHeaders(3)
	rc.respond(3, "after reset")
	if r, err := readResponse(cs2); err != nil || string(r.body) != "after reset" {
		t.Fatalf("%v", err)
	}
}

// TestClientPeerSettings: the server's HEADER_TABLE_SIZE binds our encoder,
// its MAX_FRAME_SIZE our header frames, and its MAX_HEADER_LIST_SIZE what we
// send: a request over it fails before anything is sent.
func TestClientPeerSettings(t *testing.T) {
	cc, rc := rawUpstream(t, nil, true,
		http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: 40000})
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(0, nil) // a dynamic table reference is a decoding error
	rc.fr.SetMaxReadFrameSize(16384)
	rc.sync()
	long := string(bytes.Repeat([]byte("a"), 30000))
	for i := range 2 {
		cs, err := cc.OpenStream(request("GET", "/", "x-custom", "same value", "x-long", long), true)
		if err != nil {
			t.Fatal(err)
		}
		h := rc.wantHeaders(cs.ID())
		if v := h.PseudoValue("path"); v != "/" || len(h.Fields) != 6 {
			t.Fatalf("request %d decoded as %v", i, h.Fields[:4])
		}
		rc.respond(cs.ID(), "")
		if _, err := readResponse(cs); err != nil {
			t.Fatal(err)
		}
	}
	_, err := cc.OpenStream(request("GET", "/", "x-long", long+long), true)
	if !errors.Is(err, ErrInvalidRequest) || !NotProcessed(err) {
		t.Fatalf("request over the server's header list limit: %v", err)
	}
	if cc.Active() != 0 {
		t.Fatal("a refused request left a stream")
	}
}

// TestClientEarlyResponse: a complete response, then RST_STREAM(NO_ERROR)
// while the request body is still being sent (RFC 9113 §8.1): the response
// stands, and the body's writer learns to stop.
func TestClientEarlyResponse(t *testing.T) {
	cc, rc := rawUpstream(t, nil, true)
	cs := open(t, cc, false)
	rc.wantHeaders(1)
	rc.respond(1, "early")
	rc.fr.WriteRSTStream(1, http2.ErrCodeNo)
	r, err := readResponse(cs)
	if err != nil || string(r.body) != "early" {
		t.Fatalf("early response: %v", err)
	}
	<-cs.Done()
	_, err = cs.Write([]byte("more"))
	var re *ResetError
	if !errors.As(err, &re) || !re.Remote || re.Code != http2.ErrCodeNo || NotProcessed(err) {
		t.Fatalf("Write after the early response: %v", err)
	}
}

// TestClientOpenStreamBody: a request whose body is at hand leaves as its
// header block and DATA, END_STREAM on the last DATA frame (no empty frame
// to end it); what the send window does not allow waits for WriteLast.
func TestClientOpenStreamBody(t *testing.T) {
	tests := []struct {
		name     string
		size     int
		wantSent int
	}{
		{"small", 100, 100},
		{"past the window", 70000, defaultWindow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cc, rc := rawUpstream(t, nil, true)
			body := bytes.Repeat([]byte("b"), tc.size)
			cs, sent, err := cc.OpenStreamBody(request("POST", "/"), body, true)
			if err != nil || sent != tc.wantSent {
				t.Fatalf("OpenStreamBody: sent %d, %v; want %d", sent, err, tc.wantSent)
			}
			if h := rc.wantHeaders(1); h.StreamEnded() {
				t.Fatal("END_STREAM on the header block of a request with a body")
			}
			got, ended := 0, false
			read := func(upTo int) {
				for got < upTo && !ended {
					switch f := rc.read().(type) {
					case *http2.DataFrame:
						if f.StreamID != 1 || ended {
							t.Fatalf("DATA on stream %d after END_STREAM %v", f.StreamID, ended)
						}
						if len(f.Data()) == 0 {
							t.Fatal("an empty DATA frame")
						}
						got += len(f.Data())
						ended = f.StreamEnded()
					}
				}
			}
			read(sent)
			if sent < len(body) {
				if ended {
					t.Fatal("END_STREAM before the whole body")
				}
				rc.fr.WriteWindowUpdate(0, uint32(len(body)))
				rc.fr.WriteWindowUpdate(1, uint32(len(body)))
				if _, err := cs.WriteLast(body[sent:]); err != nil {
					t.Fatal(err)
				}
				read(len(body))
			}
			if got != len(body) || !ended {
				t.Fatalf("server got %d bytes, END_STREAM %v; want %d and END_STREAM on the last DATA", got, ended, len(body))
			}
		})
	}
}

// TestClientClosedStreams: the client remembers the streams it closed, as
// the server does, for late frames on them (RFC 9113 §5.1). On a stream
// that ended both ways a late DATA is answered RST_STREAM(STREAM_CLOSED),
// and a late HEADERS is a connection error STREAM_CLOSED; on a stream the
// client reset, what the server had in flight is dropped without an
// answer. Until the HEADERS, the connection serves on.
func TestClientClosedStreams(t *testing.T) {
	cc, rc := rawUpstream(t, nil, true)
	done := open(t, cc, true)
	rc.wantHeaders(1)
	rc.respond(1, "done")
	if r, err := readResponse(done); err != nil || string(r.body) != "done" {
		t.Fatalf("stream 1: %v", err)
	}
	<-done.Done()
	reset := open(t, cc, false)
	rc.wantHeaders(3)
	reset.Reset(http2.ErrCodeCancel)
	rc.wantRST(3, http2.ErrCodeCancel)

	rc.headers(3, false, ":status", "200") // in flight when the RST_STREAM came
	rc.fr.WriteData(3, true, []byte("late"))
	rc.fr.WriteData(1, true, []byte("late"))
	rc.fr.WritePing(false, [8]byte{'l', 'a', 't', 'e'})
	type rst struct {
		id   uint32
		code http2.ErrCode
	}
	var rsts []rst
	rc.until("PING ack", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			rsts = append(rsts, rst{f.StreamID, f.ErrCode})
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v (%q)", f.ErrCode, f.DebugData())
		case *http2.PingFrame:
			return f.IsAck()
		}
		return false
	})
	if len(rsts) != 1 || rsts[0] != (rst{1, http2.ErrCodeStreamClosed}) {
		t.Fatalf("RST_STREAMs %v, want one for stream 1, STREAM_CLOSED", rsts)
	}
	next := open(t, cc, true)
	rc.wantHeaders(5)
	rc.respond(5, "next")
	if r, err := readResponse(next); err != nil || string(r.body) != "next" {
		t.Fatalf("stream 5: %v", err)
	}

	rc.headers(1, true, ":status", "200")
	rc.wantGoAway(http2.ErrCodeStreamClosed)
	<-cc.Done()
	var ce *ConnError
	if err := cc.Err(); !errors.As(err, &ce) || ce.Code != http2.ErrCodeStreamClosed {
		t.Fatalf("Err() = %v, want a connection error STREAM_CLOSED", err)
	}
}
