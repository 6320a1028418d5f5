// Package pool keeps idle upstream HTTP/1.1 connections for reuse.
//
// A connection is handed out only when it is still usable: one whose peer
// already sent FIN or RST is detected before use (a non-blocking peek) and
// closed instead. On Linux a watcher also notices such a close while the
// connection sits idle and removes it at once (pingora's idle_poll), so most
// dead connections never reach the check. Connections retire by age, by
// idle time, and by the limits an upstream announces in Keep-Alive.
package pool

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/clock"
	"github.com/sluice-proxy/sluice/internal/sock"
)

// Limits govern the connections of one upstream. A Limits value is shared by
// all the connections dialed with it and must not change while in use.
type Limits struct {
	// MaxIdle is the number of idle connections kept per server; 0 keeps
	// none (no pooling).
	MaxIdle int
	// IdleTimeout closes a connection idle this long; 0 means no limit.
	IdleTimeout time.Duration
	// MaxRequests retires a connection after this many requests; 0 means
	// no limit beyond what the upstream announces.
	MaxRequests int
	// MaxAge retires a connection this long after it was opened; 0 means
	// no limit.
	MaxAge time.Duration
	// Once governs the connections a request that must be sent at most
	// once may take.
	Once Once
}

// Once governs the pooled connections a request that must be sent at most
// once (a POST without an idempotency key, say) may take. Such a request
// cannot be resent if its connection turns out dead, and a pooled
// connection can be dead without a sign: a process that decides to exit
// (gunicorn's max_requests) stops reading its kept-alive connections the
// moment it decides, milliseconds before it says so on another connection
// and up to hundreds of milliseconds before the resets arrive. A new
// connection goes to a process that is accepting.
type Once struct {
	// Mode chooses between the pool and a new connection; the zero value
	// is Learn.
	Mode OnceMode
	// MaxIdle is the longest such a request's pooled connection may have
	// been idle (0 means DefaultOnceMaxIdle), so that it does not meet an
	// idle timeout the server does not announce (gunicorn's 2 s).
	MaxIdle time.Duration
}

// OnceMode says whether a request that must be sent at most once takes a
// pooled connection.
type OnceMode uint8

const (
	// Learn takes a pooled connection to a server that has earned it:
	// TrustAfter exchanges since the server last dropped a connection such
	// a request could have taken (idle less than MaxIdle, or older than
	// its announcement of a close when it recycles processes), and never
	// once it was seen recycling. Otherwise it dials.
	Learn OnceMode = iota
	// Dial always dials.
	Dial
	// Reuse takes a pooled connection idle at most MaxIdle, and none of a
	// recycling server opened before its last announced close.
	Reuse
)

var onceModes = [...]string{Learn: "learn", Dial: "dial", Reuse: "reuse"}

func (m OnceMode) String() string {
	if int(m) < len(onceModes) {
		return onceModes[m]
	}
	return "OnceMode(" + strconv.Itoa(int(m)) + ")"
}

// ParseOnceMode parses "learn", "dial" or "reuse".
func ParseOnceMode(s string) (OnceMode, error) {
	for i, n := range onceModes {
		if n == s {
			return OnceMode(i), nil
		}
	}
	return 0, fmt.Errorf("must be learn, dial or reuse, not %q", s)
}

// DefaultOnceMaxIdle is Once.MaxIdle's default: below the shortest idle
// timeout common servers keep without announcing it (gunicorn 2 s, Node 5 s).
const DefaultOnceMaxIdle = time.Second

// TrustAfter is how many exchanges a server must complete, since it last
// dropped a connection a request that must be sent once could have taken,
// before Learn lets such requests take its pooled connections. A server
// that recycles its processes every few hundred requests never gets there.
const TrustAfter = 1000

func (o *Once) maxIdle() time.Duration {
	if o.MaxIdle <= 0 {
		return DefaultOnceMaxIdle
	}
	return o.MaxIdle
}

// Conn is an upstream connection with the history the retry and reuse
// decisions need. Its fields are owned by whoever holds the connection: the
// pool while it is idle, a request while it is in use.
type Conn struct {
	net.Conn
	// Reader reads this connection; its buffer is released while idle.
	Reader h1.Reader
	// Key identifies the server (and connection options) it belongs to.
	Key    string
	Limits *Limits
	// Created is when the connection was established; IdleSince when it
	// was last put back.
	Created, IdleSince time.Time
	// Served counts the requests completed on it.
	Served int
	// MaxServed and IdleLimit are limits learned from the upstream's
	// Keep-Alive header (0 = none learned): retire after MaxServed
	// requests, and treat it as expired once idle for IdleLimit.
	MaxServed int
	IdleLimit time.Duration

	// Intrusive list links: per key (most recent first) and global LRU.
	list         *idleList // its key's list while idle; nil while in use
	prev, next   *Conn
	gprev, gnext *Conn
	id           uint64  // the watcher's name for it, from its first Put
	sv           *server // what the pool knows of its server, from its first Put
	sys          sysConn // the socket: the TCP connection's, under TLS too
	rd           readDeadline

	// A TLS connection's layers: tls is Conn, and tr the TCP connection
	// under it. Both are nil for a plain TCP connection.
	tls *tls.Conn
	tr  *transport
}

// NewConn wraps a freshly dialed connection.
func NewConn(c net.Conn, key string, limits *Limits, now time.Time) *Conn {
	pc := &Conn{Conn: sock.Wrap(c), Key: key, Limits: limits, Created: now}
	pc.Reader.Reset(pc) // its deadlines go through pc (SetReadDeadline)
	pc.sys.init(c)
	return pc
}

// Close closes the connection. A TLS connection first sends its peer a
// close_notify if the socket has room for it now; Close never waits for
// the peer.
func (c *Conn) Close() error {
	if c.tr != nil {
		c.tr.closing.Store(true)
	}
	return c.Conn.Close()
}

// alive reports whether an idle connection can still carry a request (see
// sysConn.alive, and tlsAlive for a TLS connection).
func (c *Conn) alive() bool {
	if c.tr != nil {
		return c.tlsAlive()
	}
	return c.sys.alive()
}

// discard closes an idle connection the pool no longer wants, with a reset
// rather than a FIN, so that the pool's own closes leave no TIME_WAIT
// behind: sluice may open and retire many upstream connections (requests
// that must not be resent dial new ones), and a proxy that accumulates
// TIME_WAIT runs out of local ports. Nothing is in flight on an idle
// connection, so the reset loses nothing.
func (c *Conn) discard() {
	raw := c.Conn
	if c.tr != nil {
		raw = c.tr.Conn
	}
	if tc, ok := sock.TCP(raw); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// Stats are counters of what the pool did, for metrics and tests.
type Stats struct {
	Hits    uint64 // Get returned a pooled connection
	Misses  uint64 // Get found none usable
	Stale   uint64 // Get found a connection whose peer had closed it
	Watched uint64 // the watcher removed a connection the peer closed while idle
	Expired uint64 // closed after idle_timeout (or a learned Keep-Alive timeout)
	Retired uint64 // closed by max_requests, max_age or a learned Keep-Alive max
	Evicted uint64 // closed to respect the overall idle limit
	TooOld  uint64 // passed over by a request that must be sent once: idle too long
	Closing uint64 // passed over: opened before its recycling server announced a close
	// Untrusted counts the requests that must be sent once and dialed
	// under Learn because their server had not earned the pool's trust.
	Untrusted uint64
	Idle      int // connections idle now
}

// Pool holds idle connections by key. It is safe for concurrent use. The
// zero value is not usable; use New, and Close when done.
type Pool struct {
	now func() time.Time

	mu       sync.Mutex
	maxTotal int
	keys     map[string]*idleList       // each key's idle connections; empty lists go at the next sweep
	lru      struct{ head, tail *Conn } // all idle conns; head is the most recent
	byID     map[uint64]*Conn
	nextID   uint64
	servers  map[string]*server // what the pool has learned of each server
	total    int
	closed   bool

	hits, misses, stale, watched, expired, retired, evicted, tooOld, closingSkips, untrusted atomic.Uint64

	w    watcher
	done chan struct{}
	wg   sync.WaitGroup
}

// New returns a pool holding at most maxTotal idle connections in all. now
// is the clock (nil = the monotonic clock of internal/clock). It starts one
// goroutine, stopped by Close.
func New(maxTotal int, now func() time.Time) *Pool {
	return newPool(maxTotal, now, newWatcher())
}

// newPool is New with the watcher w. Tests give a zero watcher, which has
// no epoll set: the goroutine then sleeps between sweeps, a wait that a
// testing/synctest bubble's clock advances, where epoll_wait is a system
// call that no fake clock can end.
func newPool(maxTotal int, now func() time.Time, w watcher) *Pool {
	if now == nil {
		now = clock.Now
	}
	p := &Pool{
		maxTotal: maxTotal,
		now:      now,
		keys:     make(map[string]*idleList),
		byID:     make(map[uint64]*Conn),
		servers:  make(map[string]*server),
		done:     make(chan struct{}),
		w:        w,
	}
	p.wg.Add(1)
	go p.run()
	return p
}

// ClosingWindow is how long after a recycling server announced it was
// closing one connection (Connection: close) that Get hands out none of
// the server's connections opened before the announcement. When a worker
// process recycles (gunicorn's max_requests), its other kept-alive
// connections stop being read at once and die with it up to a few hundred
// milliseconds later; a request sent on one waits for that death and must
// then be retried, or cannot be, while a new connection costs a connect.
//
// A server counts as recycling once a connection of it that predates such
// an announcement dies within the window. A server that only limits the
// requests per connection (nginx's keepalive_requests) closes that one
// connection and nothing else, so it never counts, and its pool is not
// bypassed after each of those closes.
const ClosingWindow = 2 * time.Second

// idleList is one key's idle connections, most recently used first. It
// stays in the pool's map while empty until the next sweep, so that a key
// whose only connection goes out and comes back costs no map changes.
type idleList struct {
	head, tail *Conn
	n          int
}

// server is what the pool has learned of one server (key).
type server struct {
	lastClose time.Time // when it last announced a close
	recycles  bool      // its other connections died after an announcement
	// answered counts exchanges completed since the server last dropped a
	// connection a request that must be sent once could have taken.
	answered int
}

// trusted reports whether Learn lets requests that must be sent once take
// the server's pooled connections.
func (sv *server) trusted() bool { return !sv.recycles && sv.answered >= TrustAfter }

// Get returns the most recently used idle connection for key that is still
// usable, or nil. It returns none opened before a recycling server last
// announced a close, within ClosingWindow (those stay pooled until then).
//
// once is nil for a request that may be sent again, and the rules for one
// that must be sent at most once otherwise: then Get returns nil when they
// say to dial, and no connection idle longer than once.MaxIdle.
func (p *Pool) Get(key string, once *Once) *Conn { return p.GetAt(key, once, p.now()) }

// GetAt is Get for a caller that read the time a moment ago (a try's
// start): now stands for the pool's clock, which Get reads.
func (p *Pool) GetAt(key string, once *Once, now time.Time) *Conn {
	var dead []*Conn
	defer func() {
		for _, c := range dead {
			c.discard()
		}
	}()
	var maxIdle time.Duration
	if once != nil {
		if once.Mode == Dial {
			p.misses.Add(1)
			return nil
		}
		maxIdle = once.maxIdle()
	}
	p.mu.Lock()
	sv := p.servers[key]
	if once != nil && once.Mode == Learn && (sv == nil || !sv.trusted()) {
		p.mu.Unlock()
		p.untrusted.Add(1)
		p.misses.Add(1)
		return nil
	}
	var closing time.Time
	hasClosing := false
	if sv != nil && sv.recycles && now.Sub(sv.lastClose) < ClosingWindow {
		closing, hasClosing = sv.lastClose, true
	}
	list := p.keys[key]
	var c *Conn
	if list != nil {
		c = list.head
	}
	for c != nil {
		next := c.next
		if expired(c, now) {
			p.remove(c)
			dead = append(dead, c)
			p.expired.Add(1)
			c = next
			continue
		}
		if maxIdle > 0 && now.Sub(c.IdleSince) > maxIdle {
			// The list runs from most to least recently used: the rest
			// are older still.
			p.tooOld.Add(1)
			break
		}
		if hasClosing && c.Created.Before(closing) {
			p.closingSkips.Add(1)
			c = next
			continue
		}
		p.remove(c)
		p.mu.Unlock()
		if c.alive() {
			p.hits.Add(1)
			return c
		}
		p.stale.Add(1)
		dead = append(dead, c)
		p.mu.Lock()
		p.died(c, now)
		// The list may have changed while unlocked, or been swept away
		// empty and made anew.
		c = nil
		if list = p.keys[key]; list != nil {
			c = list.head
		}
	}
	p.mu.Unlock()
	p.misses.Add(1)
	return nil
}

// MarkClosing records that the server behind key just announced it was
// closing a connection (see ClosingWindow).
func (p *Pool) MarkClosing(key string) {
	now := p.now()
	p.mu.Lock()
	p.server(key).lastClose = now
	p.mu.Unlock()
}

// server returns what the pool knows of key's server; p.mu held.
func (p *Pool) server(key string) *server {
	sv := p.servers[key]
	if sv == nil {
		sv = &server{}
		p.servers[key] = sv
	}
	return sv
}

// Dead records that c, taken from the pool, was found closed by its server
// when a request was sent on it (retry.Stale). Such deaths, and those the
// pool sees itself, teach it which servers recycle their processes and
// which drop connections that requests sent once could have taken.
func (p *Pool) Dead(c *Conn) {
	now := p.now()
	p.mu.Lock()
	p.died(c, now)
	p.mu.Unlock()
}

// died learns from the death of c, found dead or closed by its server;
// p.mu held. A server whose connection older than its last announced close
// dies within ClosingWindow of it recycles processes. Any death of a
// connection that a request sent once could have taken (idle less than its
// Once.MaxIdle, or dead within the window after such an announcement) makes
// the server earn Learn's trust again.
func (p *Pool) died(c *Conn, now time.Time) {
	sv := p.servers[c.Key]
	if sv == nil {
		return
	}
	afterClose := c.Created.Before(sv.lastClose) && now.Sub(sv.lastClose) < ClosingWindow
	if afterClose {
		sv.recycles = true
	}
	var once Once
	if c.Limits != nil {
		once = c.Limits.Once
	}
	if afterClose || now.Sub(c.IdleSince) < once.maxIdle() {
		sv.answered = 0
	}
}

// Put offers a connection back after a clean exchange (the caller has
// counted it in Served). The pool keeps it when its limits allow, and closes
// it otherwise; Put reports whether it was kept.
func (p *Pool) Put(c *Conn) bool {
	now := p.now()
	l := c.Limits
	if l == nil || l.MaxIdle <= 0 || c.Reader.Buffered() > 0 {
		c.Reader.Release() // its buffer back to the pool, when it holds nothing unread
		c.Close()
		return false
	}
	if (l.MaxRequests > 0 && c.Served >= l.MaxRequests) ||
		(c.MaxServed > 0 && c.Served >= c.MaxServed) ||
		(l.MaxAge > 0 && now.Sub(c.Created) >= l.MaxAge) {
		p.retired.Add(1)
		c.Reader.Release()
		c.discard()
		return false
	}
	c.Reader.Release()
	c.IdleSince = now

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return false
	}
	if c.sv == nil {
		c.sv = p.server(c.Key)
	}
	c.sv.answered++
	var drop []*Conn
	list := p.keys[c.Key]
	if list == nil {
		list = &idleList{}
		p.keys[c.Key] = list
	}
	// Per-key limit: drop this key's least recently used.
	if list.n >= l.MaxIdle {
		last := list.tail
		p.remove(last)
		drop = append(drop, last)
	}
	// Overall limit: drop the least recently used of all.
	if p.maxTotal > 0 && p.total >= p.maxTotal && p.lru.tail != nil {
		last := p.lru.tail
		p.remove(last)
		drop = append(drop, last)
	}
	p.insert(c, list)
	p.mu.Unlock()
	for _, d := range drop {
		p.evicted.Add(1)
		d.discard()
	}
	return true
}

// SetMaxTotal changes the most idle connections the pool holds in all, as
// New's maxTotal: a reload's new bound. Lowered below those idle now, it
// closes the least recently used at once.
func (p *Pool) SetMaxTotal(maxTotal int) {
	p.mu.Lock()
	p.maxTotal = maxTotal
	var drop []*Conn
	for maxTotal > 0 && p.total > maxTotal && p.lru.tail != nil {
		last := p.lru.tail
		p.remove(last)
		drop = append(drop, last)
	}
	p.mu.Unlock()
	for _, d := range drop {
		p.evicted.Add(1)
		d.discard()
	}
}

// Close closes every idle connection and stops the pool's goroutine. Later
// Puts close their connection.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var all []*Conn
	for c := p.lru.head; c != nil; c = c.gnext {
		all = append(all, c)
	}
	for _, c := range all {
		p.remove(c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.discard()
	}
	close(p.done)
	p.w.wake()
	p.wg.Wait()
	p.w.close()
}

// IdleByKey reports the number of idle connections of each key that has
// any, for an admin page. It holds the pool's lock while it reports:
// report must not call the pool.
func (p *Pool) IdleByKey(report func(key string, idle int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, l := range p.keys {
		if l.n > 0 {
			report(k, l.n)
		}
	}
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	idle := p.total
	p.mu.Unlock()
	return Stats{
		Hits: p.hits.Load(), Misses: p.misses.Load(), Stale: p.stale.Load(),
		Watched: p.watched.Load(), Expired: p.expired.Load(), Retired: p.retired.Load(),
		Evicted: p.evicted.Load(), TooOld: p.tooOld.Load(), Closing: p.closingSkips.Load(),
		Untrusted: p.untrusted.Load(), Idle: idle,
	}
}

// expired reports whether an idle connection is past its idle timeout, its
// learned Keep-Alive timeout, or its maximum age.
func expired(c *Conn, now time.Time) bool {
	idle := now.Sub(c.IdleSince)
	l := c.Limits
	return (l.IdleTimeout > 0 && idle >= l.IdleTimeout) ||
		(c.IdleLimit > 0 && idle >= c.IdleLimit) ||
		(l.MaxAge > 0 && now.Sub(c.Created) >= l.MaxAge)
}

// insert adds c at the front of its key's list and of the LRU; p.mu held.
func (p *Pool) insert(c *Conn, list *idleList) {
	c.list = list
	c.prev, c.next = nil, list.head
	if list.head != nil {
		list.head.prev = c
	} else {
		list.tail = c
	}
	list.head = c
	list.n++

	c.gprev, c.gnext = nil, p.lru.head
	if p.lru.head != nil {
		p.lru.head.gprev = c
	} else {
		p.lru.tail = c
	}
	p.lru.head = c
	p.total++

	if c.id == 0 {
		// Registered once for the connection's life: the watcher then
		// costs no system call per request.
		p.nextID++
		c.id = p.nextID
		p.w.add(c)
	}
	p.byID[c.id] = c
}

// remove takes c out of the lists and the watcher; p.mu held.
func (p *Pool) remove(c *Conn) {
	delete(p.byID, c.id)

	list := c.list
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		list.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		list.tail = c.prev
	}
	c.prev, c.next, c.list = nil, nil, nil
	list.n--

	if c.gprev != nil {
		c.gprev.gnext = c.gnext
	} else {
		p.lru.head = c.gnext
	}
	if c.gnext != nil {
		c.gnext.gprev = c.gprev
	} else {
		p.lru.tail = c.gprev
	}
	c.gprev, c.gnext = nil, nil
	p.total--
}

// run watches idle connections and sweeps expired ones until Close.
func (p *Pool) run() {
	defer p.wg.Done()
	var ids []uint64
	for {
		ids = p.w.wait(ids[:0], time.Second)
		select {
		case <-p.done:
			return
		default:
		}
		if len(ids) > 0 {
			p.closeWatched(ids)
		}
		p.sweep()
	}
}

// closeWatched removes the connections whose peers closed them while idle.
func (p *Pool) closeWatched(ids []uint64) {
	var dead []*Conn
	p.mu.Lock()
	now := p.now()
	for _, id := range ids {
		if c := p.byID[id]; c != nil {
			p.remove(c)
			p.died(c, now)
			dead = append(dead, c)
		}
	}
	p.mu.Unlock()
	for _, c := range dead {
		p.watched.Add(1)
		c.Close()
	}
}

// sweep closes idle connections past their limits, oldest first.
func (p *Pool) sweep() {
	now := p.now()
	var old []*Conn
	p.mu.Lock()
	for c := p.lru.tail; c != nil; {
		prev := c.gprev
		if expired(c, now) {
			p.remove(c)
			old = append(old, c)
		}
		c = prev
	}
	for key, list := range p.keys {
		if list.n == 0 {
			delete(p.keys, key)
		}
	}
	p.mu.Unlock()
	for _, c := range old {
		p.expired.Add(1)
		c.discard()
	}
}
