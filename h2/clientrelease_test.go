package h2

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestClientReleaseMidBlock: a stream released while its response header
// block is being decoded into it (HEADERS came, its CONTINUATION not yet)
// is reset at once, but recycled only once the block has ended: until
// then the reader, outside the lock, writes the block's fields into the
// stream's own room. Recycled at Release, it would be handed to the next
// request, whose response fields the late CONTINUATION would overwrite.
func TestClientReleaseMidBlock(t *testing.T) {
	cc, rc := rawUpstream(t, nil, true)
	cs := open(t, cc, true)
	rc.wantHeaders(1)
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.block(":status", "200")}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the client to begin decoding the header block", func() bool {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		return cc.decoding == cs
	})
	cs.Release()
	rc.wantRST(1, http2.ErrCodeCancel)
	cc.mu.Lock()
	kept := cs.cc == cc && cs.released
	cc.mu.Unlock()
	if !kept {
		t.Fatal("a stream released mid-block was recycled before the block ended")
	}

	// The next request, on another connection, gets a stream of its own.
	cc2, rc2 := rawUpstream(t, nil, true)
	next := open(t, cc2, true)
	if next == cs {
		t.Fatal("a stream released mid-block was handed to another request")
	}
	rc2.wantHeaders(1)
	want := []string{":status", "200", "x-one", "1", "x-two", "2", "x-three", "3"}
	rc2.headers(1, true, want...)
	next.SetReadDeadline(time.Now().Add(failsafe))
	h, err := next.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	// The first stream's block ends: its fields go where it had room.
	if err := rc.fr.WriteContinuation(1, true, rc.block("x-late-a", "a", "x-late-b", "b", "x-late-c", "c")); err != nil {
		t.Fatal(err)
	}
	rc.sync()
	var got []string
	for _, f := range h {
		got = append(got, f.Name, f.Value)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the next request's response fields %v, want %v", got, want)
	}
	cc.mu.Lock()
	recycled := cs.cc == nil && cc.decoding == nil
	cc.mu.Unlock()
	if !recycled {
		t.Fatal("the released stream was not recycled once its header block ended")
	}
	if err := cc.Err(); err != nil {
		t.Fatalf("the late block ended the connection: %v", err)
	}
}

// TestClientReleaseBeforeBodyEnd: a stream released before its response
// body was read to its end is closed by Release (reset when it is still
// open), so that DATA the server still sends on it finds no stream,
// whatever request the recycled stream serves next: the next response on
// the connection holds its own bytes only. A response that had ended,
// unread, gives its buffer back.
func TestClientReleaseBeforeBodyEnd(t *testing.T) {
	for _, ended := range []bool{false, true} {
		t.Run(fmt.Sprintf("ended=%v", ended), func(t *testing.T) {
			cc, rc := rawUpstream(t, nil, true)
			first := open(t, cc, true)
			rc.wantHeaders(1)
			rc.headers(1, false, ":status", "200")
			rc.fr.WriteData(1, ended, []byte("first's body"))
			rc.sync()
			first.SetReadDeadline(time.Now().Add(failsafe))
			if _, err := first.ReadHeader(); err != nil {
				t.Fatal(err)
			}
			first.Release()
			if !ended {
				rc.wantRST(1, http2.ErrCodeCancel)
			}
			second := open(t, cc, true)
			rc.wantHeaders(3)
			if !ended {
				// In flight when the RST_STREAM came.
				rc.fr.WriteData(1, false, []byte("first's late DATA"))
			}
			rc.headers(3, false, ":status", "200")
			rc.fr.WriteData(3, false, []byte("second's"))
			if !ended {
				rc.fr.WriteData(1, true, []byte("first's end"))
			}
			rc.fr.WriteData(3, true, []byte(" body"))
			r, err := readResponse(second)
			if err != nil || string(r.body) != "second's body" {
				t.Fatalf("the next response's body %q, %v; want %q", r.body, err, "second's body")
			}
			second.Release()
			if cc.Active() != 0 {
				t.Fatalf("%d streams open after both were released", cc.Active())
			}
		})
	}
}

// TestClientReleaseConcurrent: goroutines sharing connections release
// their streams at every point of an exchange (before the response head,
// after it, in the middle of the body, after the trailers) while the
// server is still answering: every response read has its own fields,
// bytes and trailers, and under -race no stream is written by its
// connection once a later request has it.
func TestClientReleaseConcurrent(t *testing.T) {
	body := func(path string) []byte { return bytes.Repeat([]byte(path+";"), 3000) } // several DATA frames
	ts := newTestServer(t, nil, func(st *Stream) {
		path, _ := field(st.Header(), ":path")
		if st.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "x-path", Value: path}}, false) != nil {
			return
		}
		if _, err := st.Write(body(path)); err != nil {
			return
		}
		st.WriteTrailers([]hpack.HeaderField{{Name: "x-end", Value: path}})
	})
	conns := []*ClientConn{dialClient(t, ts.addr(), nil), dialClient(t, ts.addr(), nil)}
	const workers, rounds = 8, 60
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { errs <- releaseRounds(conns[w%len(conns)], w, rounds, body) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, cc := range conns {
		if n := cc.Active(); n != 0 {
			t.Fatalf("%d streams open after every one was released", n)
		}
	}
}

// releaseRounds makes rounds requests on cc, releasing each at a point of
// its exchange that goes round, and checks what it read of each.
func releaseRounds(cc *ClientConn, w, rounds int, body func(string) []byte) error {
	buf := make([]byte, 1000)
	for i := range rounds {
		path := fmt.Sprintf("/w%d/r%d", w, i)
		cs, err := cc.OpenStream(request("GET", path), true)
		if err != nil {
			return err
		}
		if err := releaseAt(cs, i%4, path, body(path), buf); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

// releaseAt reads of cs's response up to stop (0: nothing, 1: its head, 2:
// half its body, 3: all of it and its trailers), checking it is path's,
// then releases cs.
func releaseAt(cs *ClientStream, stop int, path string, want, buf []byte) error {
	defer cs.Release()
	if stop == 0 {
		return nil
	}
	cs.SetReadDeadline(time.Now().Add(failsafe))
	h, err := cs.ReadHeader()
	if err != nil {
		return err
	}
	if v, _ := field(h, "x-path"); v != path {
		return fmt.Errorf("response head for %q", v)
	}
	got := 0
	for stop >= 2 && (stop == 3 || got < len(want)/2) {
		n, err := cs.Read(buf)
		if got+n > len(want) || !bytes.Equal(buf[:n], want[got:got+n]) {
			return fmt.Errorf("body bytes %d to %d are not its own: %q", got, got+n, buf[:n])
		}
		got += n
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if stop < 3 {
		return nil
	}
	if got != len(want) {
		return fmt.Errorf("%d body bytes, want %d", got, len(want))
	}
	if v, _ := field(cs.Trailers(), "x-end"); v != path {
		return fmt.Errorf("trailers for %q", v)
	}
	if v, _ := field(h, "x-path"); v != path {
		return errors.New("its head's fields changed before Release")
	}
	return nil
}
