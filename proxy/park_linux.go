package proxy

import (
	"container/heap"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/internal/epoll"
)

// parker holds client connections that wait without a goroutine each, in
// one epoll set:
//
//   - idle ones: a connection that has waited parkAfter for its next
//     request parks until bytes (or the client's close) arrive, when the
//     parker starts a goroutine for it again, or until its idle timeout,
//     when the parker closes it;
//   - slow heads: one that has waited parkAfter for the next bytes of a
//     head it has begun parks the same way with the bytes so far stashed,
//     until the header timeout, when it gets a goroutine again to answer
//     408 (at most maxAnswering at a time, so that a thousand heads timing
//     out together do not take a thousand goroutine stacks at once);
//   - TLS handshakes whose ClientHello has not come whole: one waits
//     here after parkAfter until more of it comes, or until the header
//     timeout, when the parker closes it (conn.awaitHello);
//   - idle HTTP/2 connections, whose engine returned h2.ErrIdle (see
//     conn.runH2): they resume on bytes, the client's close, their idle
//     timeout (for the engine's GOAWAY) and Shutdown;
//   - lingering ones: a connection answered and closing, whose client may
//     still be sending, is read and its bytes thrown away here until the
//     client closes, lingerBytes came or lingerTime passed (conn.close
//     does the same with a goroutine).
//
// Ten thousand idle keep-alive clients, or slow ones sending their heads a
// byte at a time, then cost their small structures, not ten thousand
// goroutine stacks. Busy connections never park.
type parker struct {
	srv       *Server
	set       *epoll.Set
	mu        sync.Mutex
	byID      map[uint64]*conn
	due       deadlines // parked connections, earliest deadline first
	nextID    uint64
	closed    bool
	done      chan struct{}
	answering chan struct{} // a slot per goroutine answering an expired head
	discard   []byte        // lingering reads land here; the parker's goroutine's own
}

// parkAfter is how long a connection waits with its goroutine before it
// parks: long enough that a client sending request after request never
// pays for parking, short enough that idle ones park soon.
const parkAfter = 200 * time.Millisecond

// maxAnswering bounds the goroutines answering 408 to parked heads at once.
const maxAnswering = 64

// resumeBatch is how many connections the parker resumes before it lets
// them run.
const resumeBatch = 16

func newParker(srv *Server) *parker {
	set, err := epoll.New()
	if err != nil {
		return nil
	}
	p := &parker{srv: srv, set: set, byID: make(map[uint64]*conn), done: make(chan struct{}),
		answering: make(chan struct{}, maxAnswering)}
	go p.run()
	return p
}

// park registers c, whose goroutine is about to end, until bytes arrive or
// deadline passes. It reports false when c cannot be parked (the caller
// then keeps waiting with its goroutine).
func (p *parker) park(c *conn, deadline time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.add(c, deadline)
}

// add registers c; p.mu held.
func (p *parker) add(c *conn, deadline time.Time) bool {
	fd := c.ready.fd
	if fd < 0 || p.closed {
		return false
	}
	if c.parkID == 0 {
		p.nextID++
		c.parkID = p.nextID
	}
	op := syscall.EPOLL_CTL_ADD
	if c.parkArmed {
		op = syscall.EPOLL_CTL_MOD // a one-shot registration, disarmed by its last event
	}
	if err := p.set.Control(op, fd, syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLONESHOT, c.parkID); err != nil {
		return false
	}
	c.parkArmed = true
	c.parkDeadline = deadline
	if len(p.due) == 0 || deadline.Before(p.due[0].parkDeadline) {
		// The parker may be waiting for a later deadline, or none.
		p.set.Wake()
	}
	p.byID[c.parkID] = c
	heap.Push(&p.due, c)
	return true
}

// linger takes c, answered and closing, for its lingering read (see
// conn.close): its buffers go back, its sending side closes, and the
// parker reads and throws away what the client still sends, then closes
// it. It reports false when c cannot be parked; the caller then closes c
// itself.
func (p *parker) linger(c *conn) bool {
	sc := c.socket()
	if sc == nil {
		return false
	}
	c.r.Discard(c.r.Buffered())
	c.r.Release()
	c.giveBack()
	if c.tls != nil {
		// close_notify, when the handshake was done; the lingering
		// reads take the socket's bytes past TLS.
		c.tls.CloseWrite()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	sc.CloseWrite()
	// The parker keeps the deadline: the socket's own, passed already
	// when a head timed out, would fail the lingering reads at once, and
	// the close would reset what the client still sends.
	sc.SetReadDeadline(time.Time{})
	c.lingerLeft = lingerBytes
	return p.add(c, time.Now().Add(lingerTime))
}

// remove takes c off the parked set; p.mu held.
func (p *parker) remove(c *conn) {
	delete(p.byID, c.parkID)
	heap.Remove(&p.due, c.parkIndex)
}

func (p *parker) run() {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 128)
	p.discard = make([]byte, 16<<10)
	var resume, expired, waiting []*conn
	for {
		// Heads that timed out wait for a slot to answer in.
		started := 0
		for _, c := range waiting {
			if !p.takeSlot() {
				break
			}
			c.answerSlot = true
			p.srv.start(c)
			started++
		}
		waiting = append(waiting[:0], waiting[started:]...)
		wait := time.Duration(-1)
		p.mu.Lock()
		if len(p.due) > 0 {
			wait = max(time.Until(p.due[0].parkDeadline), 0)
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			for _, c := range waiting {
				p.end(c)
			}
			return
		}
		if len(waiting) > 0 && (wait < 0 || wait > 10*time.Millisecond) {
			wait = 10 * time.Millisecond // for a slot to free
		}
		n, err := p.set.Wait(events, wait)
		if err != nil {
			for _, c := range waiting {
				p.end(c)
			}
			return
		}
		resume, expired = resume[:0], expired[:0]
		now := time.Now()
		p.mu.Lock()
		for _, ev := range events[:n] {
			if c := p.byID[epoll.ID(ev)]; c != nil {
				p.remove(c)
				resume = append(resume, c)
			}
		}
		for len(p.due) > 0 && !p.due[0].parkDeadline.After(now) {
			c := p.due[0]
			p.remove(c)
			expired = append(expired, c)
		}
		p.mu.Unlock()
		for i, c := range resume {
			if c.lingerLeft > 0 {
				p.drain(c)
				continue
			}
			p.srv.start(c)
			if i%resumeBatch == resumeBatch-1 {
				// Let those started run before starting more: most
				// finish at once (a client that closed, a request
				// served inline) and their goroutines take the next
				// ones, where a thousand clients closing together
				// would otherwise take a thousand new stacks.
				runtime.Gosched()
			}
		}
		for _, c := range expired {
			if c.h2.Load() != nil {
				// Its engine ends it, with a GOAWAY.
				p.srv.start(c)
				continue
			}
			if c.state == nil && !c.helloBy.IsZero() && c.lingerLeft == 0 {
				// A ClientHello not whole in time (conn.awaitHello):
				// counted as the handshake's timeout, and closed.
				c.handshakeFailed(os.ErrDeadlineExceeded)
				p.end(c)
				continue
			}
			if c.lingerLeft == 0 && !c.headBy.IsZero() {
				// A head begun and not finished in time: a goroutine
				// answers 408 (conn.awaitHead).
				waiting = append(waiting, c)
				continue
			}
			// Idle too long, closed without a word, as a waiting
			// goroutine would have; or done lingering.
			p.end(c)
		}
	}
}

// drain reads what a lingering connection's client sent and throws it
// away, then parks it again, or closes it at the client's end or past
// lingerBytes.
func (p *parker) drain(c *conn) {
	r := c.ready.discard()
	for {
		n, err := r.Read(p.discard)
		c.lingerLeft -= n
		switch {
		case err == errWouldBlock && c.lingerLeft > 0:
			p.mu.Lock()
			ok := p.add(c, c.parkDeadline)
			p.mu.Unlock()
			if !ok {
				p.end(c)
			}
			return
		case err != nil || c.lingerLeft <= 0:
			p.end(c) // closed, reset, or enough
			return
		}
	}
}

// end closes a connection the parker held.
func (p *parker) end(c *conn) {
	switch {
	case c.lingerLeft > 0:
		c.nc.Close() // its buffers went back when it began lingering
	case c.tls != nil && c.state != nil:
		// Closing TLS writes a close_notify, which waits (up to 5 s,
		// crypto/tls's bound) when the client's window is full: not on
		// the parker's goroutine, which every parked connection waits on.
		go func() {
			c.close()
			c.srv.forget(c)
		}()
		return
	default:
		c.close()
	}
	c.srv.forget(c)
}

// takeSlot takes a slot for a goroutine answering an expired head, if one
// is free.
func (p *parker) takeSlot() bool {
	select {
	case p.answering <- struct{}{}:
		return true
	default:
		return false
	}
}

// answered gives back the slot of a goroutine that was started to answer
// an expired head.
func (p *parker) answered() { <-p.answering }

// closeAll closes every parked connection, but HTTP/2 ones, which it
// resumes for their GOAWAY, and stops the parker, for Shutdown.
func (p *parker) closeAll() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	all := append([]*conn(nil), p.due...)
	for _, c := range all {
		p.remove(c)
	}
	p.mu.Unlock()
	p.set.Wake()
	<-p.done
	p.set.Close()
	for _, c := range all {
		if c.h2.Load() != nil {
			// Its engine, told of the shutdown, says GOAWAY to
			// its client before it ends.
			p.srv.start(c)
			continue
		}
		p.end(c)
	}
}

// deadlines is a heap of parked connections by deadline.
type deadlines []*conn

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].parkDeadline.Before(d[j].parkDeadline) }
func (d deadlines) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].parkIndex, d[j].parkIndex = i, j
}

func (d *deadlines) Push(x any) {
	c := x.(*conn)
	c.parkIndex = len(*d)
	*d = append(*d, c)
}

func (d *deadlines) Pop() any {
	old := *d
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*d = old[:len(old)-1]
	c.parkIndex = -1
	return c
}
