package h2

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	ts := newTestServer(t, nil, func(st *Stream) {
		started <- struct{}{}
		<-release
		ok(st)
	})
	rc := handshake(t, ts.addr())
	rc.headers(1, true, getReq...)
	<-started
	ts.conn(0).Shutdown()

	ga := rc.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if ga.LastStreamID != 1<<31-1 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("first GOAWAY %d %v", ga.LastStreamID, ga.ErrCode)
	}
	ping := rc.until("PING", func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	// A stream opened before the client saw the GOAWAY is still served.
	rc.headers(3, true, getReq...)
	<-started
	rc.fr.WritePing(true, ping.Data)
	ga = rc.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if ga.LastStreamID != 3 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("second GOAWAY %d %v", ga.LastStreamID, ga.ErrCode)
	}
	// Beyond the last stream id: ignored.
	rc.headers(5, true, getReq...)
	close(release)
	got := map[uint32]bool{}
	for {
		f, err := rc.next()
		if err != nil {
			break
		}
		if d, ok := f.(*http2.DataFrame); ok && d.StreamEnded() {
			got[d.StreamID] = true
		}
		if f.Header().StreamID == 5 {
			t.Fatalf("stream 5 answered: %v", f)
		}
	}
	if !got[1] || !got[3] {
		t.Fatalf("responses ended: %v", got)
	}
	if err := <-ts.errs; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestShutdownNoPingAck: a client that does not answer the PING gets the
// final GOAWAY after PingTimeout.
func TestShutdownNoPingAck(t *testing.T) {
	ts := newTestServer(t, &Settings{PingTimeout: 10 * time.Millisecond}, ok)
	rc := handshake(t, ts.addr())
	rc.headers(1, true, getReq...)
	rc.wantResponse(1)
	ts.conn(0).Shutdown()
	var last []uint32
	for {
		f, err := rc.next()
		if err != nil {
			break
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			last = append(last, ga.LastStreamID)
		}
	}
	if len(last) != 2 || last[0] != 1<<31-1 || last[1] != 1 {
		t.Fatalf("GOAWAYs' last stream ids %v", last)
	}
}

func TestCloseWakesHandlers(t *testing.T) {
	errs := make(chan error, 2)
	ready := make(chan struct{})
	ts := newTestServer(t, nil, func(st *Stream) {
		close(ready)
		_, err := st.Read(make([]byte, 10))
		<-st.Done()
		errs <- err
		errs <- st.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, true)
	})
	rc := handshake(t, ts.addr())
	rc.headers(1, false, postReq...)
	<-ready
	ts.conn(0).Close()
	if err := <-errs; !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Read: %v", err)
	}
	if err := <-errs; err == nil {
		t.Fatal("WriteHeaders after Close succeeded")
	}
	if err := <-ts.errs; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestIdleTimeout(t *testing.T) {
	ts := newTestServer(t, &Settings{IdleTimeout: 20 * time.Millisecond}, ok)
	rc := handshake(t, ts.addr())
	rc.headers(1, true, getReq...)
	rc.wantResponse(1)
	ga := rc.wantGoAway(http2.ErrCodeNo)
	if ga.LastStreamID != 1 {
		t.Fatalf("last stream %d", ga.LastStreamID)
	}
	if err := <-ts.errs; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestClientReset(t *testing.T) {
	res := make(chan error, 1)
	ready := make(chan struct{})
	ts := newTestServer(t, nil, func(st *Stream) {
		if st.ID() != 1 {
			ok(st)
			return
		}
		close(ready)
		_, err := io.ReadAll(st)
		<-st.Done()
		res <- err
	})
	rc := handshake(t, ts.addr())
	rc.headers(1, false, postReq...)
	<-ready
	rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	var re *ResetError
	if err := <-res; !errors.As(err, &re) || !re.Remote || re.Code != http2.ErrCodeCancel {
		t.Fatalf("Read after the client's reset: %v", err)
	}
	// Frames the client had in flight on the reset stream are no error.
	rc.fr.WriteWindowUpdate(1, 10)
	rc.headers(3, true, getReq...)
	rc.wantResponse(3)
}

func TestHandlerEnds(t *testing.T) {
	var logged bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(syncWriter{&logMu, &logged}, nil))
	ts := newTestServer(t, &Settings{ErrorLog: log}, func(st *Stream) {
		switch st.ID() {
		case 1: // returns without a response
		case 3:
			panic("handler bug")
		case 5: // ends its response without reading the body
			ok(st)
		default:
			ok(st)
		}
	})
	rc := handshake(t, ts.addr())
	rc.headers(1, true, getReq...)
	rc.wantRST(1, http2.ErrCodeInternal)
	rc.headers(3, true, getReq...)
	rc.wantRST(3, http2.ErrCodeInternal)
	rc.headers(5, false, postReq...)
	if s, body := rc.wantResponse(5); s != "200" || string(body) != "ok" {
		t.Fatalf("stream 5: %q %q", s, body)
	}
	rc.wantRST(5, http2.ErrCodeNo) // §8.1: the body is not needed
	rc.headers(7, true, getReq...)
	rc.wantResponse(7)
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logged.String(), "handler bug") {
		t.Fatalf("panic not logged: %q", logged.String())
	}
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func TestDeadlines(t *testing.T) {
	errs := make(chan error, 2)
	ts := newTestServer(t, nil, func(st *Stream) {
		st.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := st.Read(make([]byte, 1))
		errs <- err
		st.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, false)
		st.SetWriteDeadline(time.Now().Add(time.Millisecond))
		_, err = st.Write([]byte("no window"))
		errs <- err
	})
	// The client grants no window: the write waits for credit.
	rc := handshake(t, ts.addr(), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	rc.headers(1, false, postReq...)
	for i := 0; i < 2; i++ {
		err := <-errs
		if !errors.Is(err, os.ErrDeadlineExceeded) || !os.IsTimeout(err) {
			t.Fatalf("error %d: %v", i, err)
		}
	}
}

// TestPeerSettings: the client's SETTINGS_INITIAL_WINDOW_SIZE bounds DATA,
// a change adjusts open streams (§6.9.2), SETTINGS_MAX_FRAME_SIZE bounds
// frames, and SETTINGS_HEADER_TABLE_SIZE the encoder.
func TestPeerSettings(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 100000)
	ts := newTestServer(t, nil, func(st *Stream) {
		st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "x-custom", Value: "same value"}}, body, true)
	})
	rc := handshake(t, ts.addr(),
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10},
		http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: 20000})
	// A decoder with no dynamic table fails if the server indexes anything.
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(0, nil)
	rc.fr.WriteWindowUpdate(0, 1<<20)
	for id := uint32(1); id <= 3; id += 2 {
		rc.headers(id, true, getReq...)
		var got, largest int
		for got < len(body) {
			f := rc.read()
			d, ok := f.(*http2.DataFrame)
			if !ok || d.StreamID != id {
				continue
			}
			if got == 0 && len(d.Data()) != 10 {
				t.Fatalf("first DATA %d bytes, want the window's 10", len(d.Data()))
			}
			if got == 0 {
				// Raise the initial window: the open stream gets the
				// difference (§6.9.2).
				rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
			}
			got += len(d.Data())
			largest = max(largest, len(d.Data()))
		}
		if largest != 20000 {
			t.Fatalf("largest DATA %d, want the client's max frame size 20000", largest)
		}
		rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	}
}
