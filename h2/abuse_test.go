package h2

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Each test here sends what a hostile client would, and would fail without
// the bound it checks.

// TestRapidReset: opening streams and resetting them at once
// (CVE-2023-44487) ends with GOAWAY(ENHANCE_YOUR_CALM). Without the reset
// budget the server would go on answering forever.
func TestRapidReset(t *testing.T) {
	ts := newTestServer(t, nil, func(st *Stream) { <-st.Done() })
	rc := handshake(t, ts.addr())
	go func() {
		for id := uint32(1); id < 20000; id += 2 {
			if rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.block(postReq...), EndHeaders: true}) != nil {
				return
			}
			if rc.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	}()
	rc.wantGoAway(http2.ErrCodeEnhanceYourCalm)
}

// TestContinuationFlood: a header block that never ends, in empty
// CONTINUATION frames or in large ones, is cut (CVE-2024-27316).
func TestContinuationFlood(t *testing.T) {
	for _, size := range []int{0, 16384} {
		ts := newTestServer(t, nil, ok)
		rc := handshake(t, ts.addr())
		go func() {
			rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.block(getReq...)})
			frag := bytes.Repeat([]byte{0x40, 0x01, 'a', 0x01, 'b'}, size/5) // literal fields a: b
			for i := 0; i < 1e6; i++ {
				if rc.fr.WriteContinuation(1, false, frag) != nil {
					return
				}
			}
		}()
		rc.wantGoAway(http2.ErrCodeEnhanceYourCalm)
	}
}

// TestHPACKBomb: a small block that decodes to a huge list stops at
// MaxHeaderList, answered 431, without reaching the handler.
func TestHPACKBomb(t *testing.T) {
	var calls atomic.Int32
	ts := newTestServer(t, nil, func(st *Stream) {
		calls.Add(1)
		ok(st)
	})
	rc := handshake(t, ts.addr())
	// Stream 1 puts a 4000-byte field in the dynamic table; stream 3 refers
	// to it 2000 times, one byte each: 8 MB decoded from a 2 KB block.
	rc.headers(1, true, append(getReq, "x-big", strings.Repeat("b", 4000))...)
	rc.wantResponse(1)
	block := rc.block(getReq...)
	for i := 0; i < 2000; i++ {
		block = append(block, 0x80|62) // indexed: the newest dynamic entry
	}
	rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndStream: true, EndHeaders: true})
	if s, _ := rc.wantResponse(3); s != "431" {
		t.Fatalf("status %q, want 431", s)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times", n)
	}
	rc.headers(5, true, getReq...)
	rc.wantResponse(5)
}

// TestControlFloods: PING, SETTINGS, WINDOW_UPDATE, PRIORITY and unknown
// frames, each asking work and carrying none, end with ENHANCE_YOUR_CALM even
// from a client that reads every answer.
func TestControlFloods(t *testing.T) {
	floods := map[string]func(rc *rawClient) error{
		"PING":          func(rc *rawClient) error { return rc.fr.WritePing(false, [8]byte{}) },
		"SETTINGS":      func(rc *rawClient) error { return rc.fr.WriteSettings() },
		"WINDOW_UPDATE": func(rc *rawClient) error { return rc.fr.WriteWindowUpdate(0, 1) },
		"PRIORITY":      func(rc *rawClient) error { return rc.fr.WritePriority(3, http2.PriorityParam{StreamDep: 5}) },
		"unknown":       func(rc *rawClient) error { return rc.fr.WriteRawFrame(0x77, 0, 0, nil) },
		"empty DATA": func(rc *rawClient) error {
			return rc.fr.WriteData(1, false, nil)
		},
	}
	for name, send := range floods {
		t.Run(name, func(t *testing.T) {
			ts := newTestServer(t, nil, func(st *Stream) { <-st.Done() })
			rc := handshake(t, ts.addr())
			rc.headers(1, false, postReq...)
			go func() {
				for i := 0; i < 1e6; i++ {
					if send(rc) != nil {
						return
					}
				}
			}()
			rc.wantGoAway(http2.ErrCodeEnhanceYourCalm)
		})
	}
}

// TestQueuedAnswersBounded: a client that sends PINGs and reads nothing
// cannot make the answers pile up: past the bound the connection ends.
// The control-frame budget is raised so that only the queue bound can act.
func TestQueuedAnswersBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		c := NewConn(nc, nil, &Settings{WriteTimeout: time.Minute}, ok)
		c.glitches = newBudget(1e9, 1e9)
		done <- c.Serve()
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The sockets keep their default buffers: shrunk to a few KiB, loopback
	// drops segments and TCP's retransmission backs off for many seconds,
	// which stalled this test. 2e6 answers (34 MB) outgrow any default.
	fr := http2.NewFramer(nc, nil)
	io.WriteString(nc, http2.ClientPreface)
	fr.WriteSettings()
	var werr error
	for i := 0; i < 2e6 && werr == nil; i++ {
		werr = fr.WritePing(false, [8]byte{byte(i)})
	}
	if werr == nil {
		t.Fatal("2e6 PINGs went unanswered and the connection is still open")
	}
	var ce *ConnError
	if err := <-done; !errors.As(err, &ce) || ce.Code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("Serve: %v", err)
	}
}

// TestTooManyStreams: streams past MaxConcurrentStreams are refused, and a
// client that keeps opening them is cut.
func TestTooManyStreams(t *testing.T) {
	ts := newTestServer(t, &Settings{MaxConcurrentStreams: 2}, func(st *Stream) { <-st.Done() })
	rc := handshake(t, ts.addr())
	rc.headers(1, true, getReq...)
	rc.headers(3, true, getReq...)
	rc.headers(5, true, getReq...)
	rc.wantRST(5, http2.ErrCodeRefusedStream)
	go func() {
		for id := uint32(7); id < 1e5; id += 2 {
			if rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.block(getReq...), EndStream: true, EndHeaders: true}) != nil {
				return
			}
		}
	}()
	rc.wantGoAway(http2.ErrCodeEnhanceYourCalm)
}

// TestSlowReader: a client that grants HTTP/2 window but reads nothing from
// TCP cannot make the server buffer without bound: the handler's Write fails
// once WriteTimeout passes with no progress, and the connection ends.
func TestSlowReader(t *testing.T) {
	werr := make(chan error, 1)
	var written atomic.Int64
	ts := newTestServer(t, &Settings{WriteTimeout: 50 * time.Millisecond}, func(st *Stream) {
		st.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, false)
		chunk := make([]byte, 64<<10)
		for {
			n, err := st.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				werr <- err
				return
			}
		}
	})
	rc := dialRaw(t, ts.addr(), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	rc.fr.WriteWindowUpdate(0, 1<<31-1-65535)
	rc.headers(1, true, getReq...)
	// ... and never reads.
	if err := <-werr; err == nil {
		t.Fatal("no error")
	}
	if err := <-ts.errs; err == nil {
		t.Fatal("Serve returned nil")
	}
	t.Logf("written before the connection was cut: %d bytes", written.Load())
}

// TestStalledStream: a handler that stops reading stalls only its stream:
// another stream's body still flows.
func TestStalledStream(t *testing.T) {
	ts := newTestServer(t, nil, func(st *Stream) {
		if p, _ := field(st.Header(), ":path"); p == "/stall" {
			<-st.Done()
			return
		}
		echo(st)
	})
	client := newClient(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		res, err := client.Post("http://"+ts.addr()+"/stall", "", pr)
		if err == nil {
			res.Body.Close()
		}
	}()
	// Fill the stalled stream's window, and more.
	go pw.Write(make([]byte, 3<<20))
	body := bytes.Repeat([]byte("y"), 1<<20)
	res, err := client.Post("http://"+ts.addr()+"/", "", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("%v, %d bytes", err, len(got))
	}
}
