package proxy

import (
	"sync"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/internal/epoll"
)

// parker holds idle client connections without a goroutine each. A
// connection that has waited parkAfter for its next request is registered
// in one epoll set and its goroutine ends; when bytes (or the client's
// close) arrive, the parker starts a goroutine for it again. Ten thousand
// idle keep-alive clients then cost their small structures, not ten
// thousand goroutine stacks. Busy connections never park.
type parker struct {
	srv    *Server
	set    *epoll.Set
	mu     sync.Mutex
	byID   map[uint64]*conn
	head   *conn // parked connections in the order they parked; their
	tail   *conn // idle deadlines come in the same order
	nextID uint64
	closed bool
	done   chan struct{}
}

// parkAfter is how long a connection waits with its goroutine before it
// parks: long enough that a client sending request after request never
// pays for parking, short enough that idle ones park soon.
const parkAfter = 200 * time.Millisecond

func newParker(srv *Server) *parker {
	set, err := epoll.New()
	if err != nil {
		return nil
	}
	p := &parker{srv: srv, set: set, byID: make(map[uint64]*conn), done: make(chan struct{})}
	go p.run()
	return p
}

// park registers c, whose goroutine is about to end, until bytes arrive or
// its idle deadline passes. It reports false when c cannot be parked (the
// caller then keeps waiting with its goroutine).
func (p *parker) park(c *conn, deadline time.Time) bool {
	fd := c.ready.fd
	if fd < 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
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
	if p.head == nil {
		// The parker may be waiting with no deadline: give it one.
		p.set.Wake()
	}
	p.byID[c.parkID] = c
	c.pprev, c.pnext = p.tail, nil
	if p.tail != nil {
		p.tail.pnext = c
	} else {
		p.head = c
	}
	p.tail = c
	return true
}

// unlink takes c off the parked list; p.mu held.
func (p *parker) unlink(c *conn) {
	delete(p.byID, c.parkID)
	if c.pprev != nil {
		c.pprev.pnext = c.pnext
	} else {
		p.head = c.pnext
	}
	if c.pnext != nil {
		c.pnext.pprev = c.pprev
	} else {
		p.tail = c.pprev
	}
	c.pprev, c.pnext = nil, nil
}

func (p *parker) run() {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 128)
	var resume, expired []*conn
	for {
		wait := time.Duration(-1)
		p.mu.Lock()
		if p.head != nil {
			wait = max(time.Until(p.head.parkDeadline), 0)
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return
		}
		n, err := p.set.Wait(events, wait)
		if err != nil {
			return
		}
		resume, expired = resume[:0], expired[:0]
		now := time.Now()
		p.mu.Lock()
		for _, ev := range events[:n] {
			if c := p.byID[epoll.ID(ev)]; c != nil {
				p.unlink(c)
				resume = append(resume, c)
			}
		}
		for c := p.head; c != nil && !c.parkDeadline.After(now); c = p.head {
			p.unlink(c)
			expired = append(expired, c)
		}
		p.mu.Unlock()
		for _, c := range resume {
			p.srv.start(c)
		}
		for _, c := range expired {
			// Idle too long: closed without a word, as a waiting
			// goroutine would have.
			c.close()
			c.srv.forget(c)
		}
	}
}

// closeAll closes every parked connection and stops the parker, for
// Shutdown.
func (p *parker) closeAll() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var all []*conn
	for c := p.head; c != nil; c = c.pnext {
		all = append(all, c)
	}
	for _, c := range all {
		p.unlink(c)
	}
	p.mu.Unlock()
	p.set.Wake()
	<-p.done
	p.set.Close()
	for _, c := range all {
		c.close()
		c.srv.forget(c)
	}
}
