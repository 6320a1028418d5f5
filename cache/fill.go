package cache

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// fill is a response being stored as it arrives: its body gathered in
// memory (at most the cache's max_object) for the store, and read by the
// requests that wait on its flight as it comes, not after it ended.
type fill struct {
	meta *Meta
	key  string // the key it is stored under
	max  int64

	mu       sync.Mutex
	body     []byte
	trailers h1.Header
	state    fillState
	wake     chan struct{} // closed when the body grows or the state changes; made by a reader that waits
}

type fillState uint8

const (
	fillGrowing fillState = iota
	fillDone
	fillFailed
)

// errFillFailed is what a request reading a fill gets when the response
// did not come whole (or outgrew max_object): its own response is cut.
var errFillFailed = errors.New("cache: the response being stored did not come whole")

func newFill(m *Meta, size, max int64) *fill {
	f := &fill{meta: m, max: max}
	if size > 0 && size <= max {
		f.body = make([]byte, 0, size)
	}
	return f
}

// write appends the next piece of the body; false when it takes the body
// past max (the fill has failed then).
func (f *fill) write(p []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != fillGrowing {
		return false
	}
	if int64(len(f.body)+len(p)) > f.max {
		f.setState(fillFailed)
		return false
	}
	f.body = append(f.body, p...)
	f.wakeUp()
	return true
}

// end marks the body complete, with its trailers (nil: none), and returns
// it.
func (f *fill) end(trailers *h1.Header) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if trailers != nil {
		f.trailers.CopyFrom(trailers)
	}
	if f.state == fillGrowing {
		f.setState(fillDone)
	}
	return f.body
}

// fail marks the fill as one that will not complete.
func (f *fill) fail() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == fillGrowing {
		f.setState(fillFailed)
	}
}

func (f *fill) done() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state == fillDone
}

func (f *fill) setState(s fillState) {
	f.state = s
	f.wakeUp()
}

func (f *fill) wakeUp() {
	if f.wake != nil {
		close(f.wake)
		f.wake = nil
	}
}

// reader returns a reader of the body from its start, whose Response
// gets the trailers once the body ended.
func (f *fill) reader(r *proxy.Response) *fillReader {
	return &fillReader{f: f, resp: r, cut: make(chan struct{})}
}

// fillReader reads a fill's body as it grows: the body of a Response that
// stands in for the upstream's, for a request that waited on the fill's
// flight.
type fillReader struct {
	f    *fill
	resp *proxy.Response
	off  int

	cutOnce sync.Once
	cut     chan struct{}
}

// Read returns the next bytes of the body, waiting for them to arrive;
// io.EOF at its end, errFillFailed when it will not come whole.
func (r *fillReader) Read(p []byte) (int, error) {
	f := r.f
	for {
		f.mu.Lock()
		if r.off < len(f.body) {
			n := copy(p, f.body[r.off:])
			r.off += n
			f.mu.Unlock()
			return n, nil
		}
		switch f.state {
		case fillDone:
			if f.trailers.Len() > 0 && r.resp != nil {
				r.resp.Trailers.CopyFrom(&f.trailers)
			}
			f.mu.Unlock()
			return 0, io.EOF
		case fillFailed:
			f.mu.Unlock()
			return 0, errFillFailed
		}
		if f.wake == nil {
			f.wake = make(chan struct{})
		}
		wake := f.wake
		f.mu.Unlock()
		select {
		case <-wake:
		case <-r.cut:
			return 0, errFillCut
		}
	}
}

// errFillCut is what a read cut short by its deadline returns.
var errFillCut = errors.New("cache: the wait for the response being stored was cut")

// SetReadDeadline cuts the reader's waits once t has passed: the engine
// cuts the waits of a request whose client left, or when the drain
// timeout passes. A deadline in the future is ignored: a wait for the
// writer's body is bounded by the writer's own timeouts.
func (r *fillReader) SetReadDeadline(t time.Time) error {
	if !t.After(time.Now()) {
		r.cutOnce.Do(func() { close(r.cut) })
	}
	return nil
}
