package park

import (
	"container/heap"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/internal/epoll"
)

// Supported reports whether a Parker can hold connections here.
const Supported = true

// Parker holds connections that wait without a goroutine each, in one
// epoll set, each until its socket has bytes or is closed (Wake) or its
// deadline passes (Expire). Its methods are safe for concurrent use.
type Parker[C Conn] struct {
	set     *epoll.Set
	mu      sync.Mutex
	byID    map[uint64]C
	due     deadlines[C] // parked connections, earliest deadline first
	nextID  uint64
	closed  bool
	done    chan struct{}
	scratch []byte // the parker's goroutine's, for Wake
}

// resumeBatch is how many connections the parker wakes before it lets
// the goroutines they started run.
const resumeBatch = 16

// retryAfter is how soon an Expire that could not be handled (see Conn)
// is called again.
const retryAfter = 10 * time.Millisecond

// New returns a running Parker, or nil when the system has no epoll set
// to give it.
func New[C Conn]() *Parker[C] {
	set, err := epoll.New()
	if err != nil {
		return nil
	}
	p := &Parker[C]{set: set, byID: make(map[uint64]C), done: make(chan struct{})}
	go p.run()
	return p
}

// Park holds c, whose socket is fd, until bytes arrive on it, it is
// closed, or deadline passes; the caller's goroutine may end then. It
// reports false when c cannot be parked (the caller then keeps waiting
// itself): fd is not a socket the set takes, or the Parker is closed.
func (p *Parker[C]) Park(c C, fd int, deadline time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.add(c, fd, deadline)
}

// add registers c; p.mu held.
func (p *Parker[C]) add(c C, fd int, deadline time.Time) bool {
	s := c.Parked()
	if fd < 0 || p.closed {
		return false
	}
	if s.id == 0 {
		p.nextID++
		s.id = p.nextID
	}
	op := syscall.EPOLL_CTL_ADD
	if s.armed {
		op = syscall.EPOLL_CTL_MOD // a one-shot registration, disarmed by its last event
	}
	if err := p.set.Control(op, fd, syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLONESHOT, s.id); err != nil {
		return false
	}
	s.armed, s.deadline, s.fd = true, deadline, fd
	if len(p.due) == 0 || deadline.Before(p.due[0].Parked().deadline) {
		// The parker may be waiting for a later deadline, or none.
		p.set.Wake()
	}
	p.byID[s.id] = c
	heap.Push(&p.due, c)
	return true
}

// remove takes c off the parked set; p.mu held.
func (p *Parker[C]) remove(c C) {
	s := c.Parked()
	delete(p.byID, s.id)
	heap.Remove(&p.due, s.index)
}

func (p *Parker[C]) run() {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 128)
	p.scratch = make([]byte, 16<<10)
	var woken, expired, retry []C
	for {
		// Expiries that could not be handled yet (Conn.Expire) are tried
		// again first.
		left := retry[:0]
		for _, c := range retry {
			if !c.Expire() {
				left = append(left, c)
			}
		}
		clear(retry[len(left):])
		retry = left
		wait := time.Duration(-1)
		p.mu.Lock()
		if len(p.due) > 0 {
			wait = max(time.Until(p.due[0].Parked().deadline), 0)
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			for _, c := range retry {
				c.Close()
			}
			return
		}
		if len(retry) > 0 && (wait < 0 || wait > retryAfter) {
			wait = retryAfter
		}
		n, err := p.set.Wait(events, wait)
		if err != nil {
			for _, c := range retry {
				c.Close()
			}
			return
		}
		woken, expired = woken[:0], expired[:0]
		now := time.Now()
		p.mu.Lock()
		for _, ev := range events[:n] {
			if c, ok := p.byID[epoll.ID(ev)]; ok {
				p.remove(c)
				woken = append(woken, c)
			}
		}
		for len(p.due) > 0 && !p.due[0].Parked().deadline.After(now) {
			c := p.due[0]
			p.remove(c)
			expired = append(expired, c)
		}
		p.mu.Unlock()
		for i, c := range woken {
			if c.Wake(p.scratch) && i%resumeBatch == resumeBatch-1 {
				// Let those started run before starting more: most
				// finish at once (a client that closed, a request
				// served inline) and their goroutines take the next
				// ones, where a thousand clients closing together
				// would otherwise take a thousand new stacks.
				runtime.Gosched()
			}
		}
		for _, c := range expired {
			if !c.Expire() {
				retry = append(retry, c)
			}
		}
	}
}

// Len returns how many connections p holds.
func (p *Parker[C]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.due)
}

// Close stops the parker and returns the connections it held, for the
// caller to end (or resume); Park fails from then on. It may be called
// once.
func (p *Parker[C]) Close() []C {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	all := append([]C(nil), p.due...)
	for _, c := range all {
		p.remove(c)
	}
	p.mu.Unlock()
	p.set.Wake()
	<-p.done
	p.set.Close()
	return all
}

// deadlines is a heap of parked connections by deadline.
type deadlines[C Conn] []C

func (d deadlines[C]) Len() int { return len(d) }
func (d deadlines[C]) Less(i, j int) bool {
	return d[i].Parked().deadline.Before(d[j].Parked().deadline)
}
func (d deadlines[C]) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].Parked().index, d[j].Parked().index = i, j
}

func (d *deadlines[C]) Push(x any) {
	c := x.(C)
	c.Parked().index = len(*d)
	*d = append(*d, c)
}

func (d *deadlines[C]) Pop() any {
	old := *d
	c := old[len(old)-1]
	var zero C
	old[len(old)-1] = zero
	*d = old[:len(old)-1]
	c.Parked().index = -1
	return c
}
