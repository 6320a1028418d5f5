package h2

import (
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestOnAbort: the function registered with OnAbort runs when the client
// resets the stream, not when the stream ends normally, not after it was
// cancelled, and at once when registered on a stream already reset.
func TestOnAbort(t *testing.T) {
	type result struct {
		id    uint32
		calls int32
	}
	results := make(chan result, 4)
	registered := make(chan struct{}, 3)
	ts := newTestServer(t, nil, func(st *Stream) {
		var calls atomic.Int32
		f := func() { calls.Add(1) }
		switch st.ID() {
		case 1: // reset by the client while the handler waits
			st.OnAbort(f)
			registered <- struct{}{}
			<-st.Done()
		case 3: // answered normally
			st.OnAbort(f)
			registered <- struct{}{}
			st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"}}, nil, true)
			<-st.Done()
		case 5: // cancelled, then reset
			st.OnAbort(f)
			st.OnAbort(nil)
			registered <- struct{}{}
			<-st.Done()
		case 7: // registered once already reset
			<-st.Done()
			st.OnAbort(f)
		}
		results <- result{st.ID(), calls.Load()}
	})
	rc := handshake(t, ts.addr())
	want := map[uint32]int32{1: 1, 3: 0, 5: 0, 7: 1}
	rc.headers(1, true, getReq...)
	rc.headers(3, true, getReq...)
	rc.headers(5, true, getReq...)
	rc.headers(7, true, getReq...)
	for range 3 {
		<-registered
	}
	for _, id := range []uint32{1, 5, 7} {
		if err := rc.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			t.Fatal(err)
		}
	}
	for range want {
		select {
		case r := <-results:
			if r.calls != want[r.id] {
				t.Errorf("stream %d: called %d times, want %d", r.id, r.calls, want[r.id])
			}
		case <-time.After(failsafe):
			t.Fatal("a handler did not finish")
		}
	}
}
