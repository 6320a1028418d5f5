package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/h2"
	"github.com/sluice-proxy/sluice/internal/clock"
	"github.com/sluice-proxy/sluice/proxy/internal/park"
	"github.com/sluice-proxy/sluice/proxy/internal/ready"
)

// conn is one client connection. Its goroutine reads a request, serves it,
// and goes back for the next until the client or sluice ends the
// connection. Pipelined requests are answered in order because they are
// served one after the other.
type conn struct {
	srv *Server
	// nc is what requests are read from and answers written to: the
	// socket, or the TLS connection over it (tls). raw is the socket.
	nc       net.Conn
	raw      net.Conn
	tls      *tls.Conn            // nil on a plain connection
	state    *tls.ConnectionState // the TLS handshake's outcome, once complete
	ln       *listener            // the listener it came from
	r        h1.Reader
	client   string // the client's IP, for X-Forwarded-For and logs
	clientIP netip.Addr
	trusted  bool     // its X-Forwarded-* fields are kept (Forwarding.Trusted)
	s        *Session // the request being served, borrowed from a pool; nil while idle
	wbuf     []byte   // the write buffer, borrowed (wbufp) while serving
	wbufp    *[]byte

	ready ready.Socket

	// linger is set when sluice answered and is closing while the client
	// may still be sending: the close then waits a moment for the client's
	// bytes, so that they do not turn the close into a reset that could
	// destroy the answer before the client reads it.
	linger bool
	// reset is set when a response that had started was aborted: the
	// close is a reset (SO_LINGER 0), never a FIN, which a client reading a
	// close-delimited body would take for its end.
	reset bool
	// flight is the try in progress of the request being served, if any,
	// for Shutdown to cut its wait short when the drain timeout passes.
	flight flight
	// chunking is set while the response's body is framed here
	// (h1down.go).
	chunking bool
	// h2 is the HTTP/2 engine serving the connection, once it speaks
	// HTTP/2, for Shutdown to send its GOAWAY.
	h2 atomic.Pointer[h2.Conn]

	// writeBy is the write deadline set on nc (zero: none). write moves it
	// only when it falls short of the send timeout, and then past it by
	// deadlineSlack, so that a client taking response after response costs
	// one deadline change per slack, not one per write.
	writeBy time.Time
	// readBy is the read deadline idleWithin set on nc, moved the same
	// lazy way for the waits between requests; zero when another read
	// deadline was set since (setReadDeadline), so that the next wait
	// sets its own.
	readBy time.Time

	// drainGraced is set once the connection had its drainIdleGrace;
	// drainNext when a request served inline (ServeInline) found the
	// server draining after its answer had kept the connection alive.
	drainGraced, drainNext bool

	// mu guards idle, set while the goroutine waits for the next request,
	// so that Shutdown can wake exactly those, and streams, the HTTP/2
	// streams being served, for the end of a drain to cut.
	mu      sync.Mutex
	idle    bool
	streams *h2exchange

	// The wait for the next request: when it times out (idleEnd), whether
	// the deadline set is the earlier one to park at, and what
	// ServeInline left to do when it stopped.
	idleEnd time.Time
	parkDue bool
	left    next

	// headBy is when the head that has begun must be whole (the header
	// timeout, counted from its first byte); zero while no head is
	// partly read.
	headBy time.Time

	// The parker's record of the connection while it waits without a
	// goroutine (park.go). lingerLeft counts the bytes it may still
	// discard while it lingers there (0: not lingering); answerSlot is set
	// when the parker started its goroutine to answer an expired head, in
	// one of a few slots.
	slot       park.Slot
	lingerLeft int
	answerSlot bool

	// helloBy is when the TLS handshake must be done (the header
	// timeout, counted from accept); zero until its wait begins. early
	// holds what came of the ClientHello before the handshake began
	// (hello_linux.go), in a pooled buffer (earlyp) once whole.
	helloBy time.Time
	early   []byte
	earlyp  *[]byte
	// What the TLS handshake's GetConfigForClient learned, for a failed
	// handshake's count and line (tls.go).
	sni     string
	refusal HandshakeFailure
}

// What readRequest leaves the connection to do.
type next uint8

const (
	serveIt  next = iota // a request is in c.s
	closeIt              // the connection is done
	parked               // the parker holds it; the goroutine must end
	readHead             // a head has begun in the buffer
	speakH2              // the client sent the HTTP/2 preface
)

func newConn(srv *Server, nc net.Conn, l *listener) *conn {
	c := &conn{srv: srv, nc: nc, raw: nc, ln: l}
	if tc, ok := nc.(*tls.Conn); ok {
		// From a listener of the caller's (tls.NewListener).
		c.tls, c.raw = tc, tc.NetConn()
	}
	// On a TLS listener's connection, the TLS connection is made when its
	// handshake begins (conn.handshake): the ClientHello may be waited
	// for without it.
	c.r.Reset(c.nc)
	unix := false
	switch a := nc.RemoteAddr().(type) {
	case *net.TCPAddr:
		c.clientIP = a.AddrPort().Addr().Unmap()
		c.client = c.clientIP.String()
	case *net.UnixAddr:
		// A Unix socket's peer has no address (its socket is unnamed):
		// "unix:", as nginx's $remote_addr has it, in the logs and in
		// X-Forwarded-For.
		c.client, unix = UnixClient, true
	case nil:
	default:
		c.client = a.String()
	}
	c.trusted = srv.Forwarding.trusts(c.clientIP) || unix && srv.Forwarding.TrustUnix
	if c.tls != nil || l != nil && l.tls != nil {
		// The socket under TLS is for the ClientHello, for waking a
		// parked connection and for the lingering reads of a close;
		// requests are read through TLS (package ready says why).
		c.ready.Init(c.raw, &c.r, nil, false)
	} else {
		c.ready.Init(nc, &c.r, c, true)
	}
	return c
}

// tcp returns the TCP connection under c, nil when there is none (a
// net.Pipe in a test).
func (c *conn) tcp() *net.TCPConn {
	tc, _ := c.raw.(*net.TCPConn)
	return tc
}

// halfCloser is a socket whose sending side closes apart from its
// receiving side: TCP, or a Unix socket.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// socket returns the TCP or Unix socket under c, for the lingering reads
// of a close; nil when there is none.
func (c *conn) socket() halfCloser {
	switch sc := c.raw.(type) {
	case *net.TCPConn:
		return sc
	case *net.UnixConn:
		return sc
	}
	return nil
}

// recovered handles a panic while serving c: a bug must not take the
// process down nor leave the client without an answer it can detect: log
// it and drop the connection (invariant 6).
func (c *conn) recovered(v any) {
	c.srv.ErrorLog.Error("internal error serving connection; closing it", "panic", v, "client", c.client,
		"stack", string(debug.Stack()))
	if c.s != nil && c.s.Status == 0 {
		c.s.keepAlive = false
		c.s.answerError(&fault.Error{Kind: fault.Internal, Source: fault.Internally, Context: fmt.Sprint("panic: ", v)})
	}
}

func (c *conn) serve() {
	if c.h2.Load() != nil {
		c.runH2(nil) // resumed by the parker
		return
	}
	if c.tls == nil && (c.ln == nil || c.ln.tls == nil) && c.r.Buffered() == 0 {
		c.readFirst()
	}
	resting := false
	defer func() {
		// A bug must not take the process down nor leave the client
		// without an answer it can detect: log it and drop the
		// connection (invariant 6).
		if v := recover(); v != nil {
			resting = false
			c.recovered(v)
		}
		if !resting {
			c.close()
			c.srv.forget(c)
		}
	}()
	if c.state == nil && (c.tls != nil || c.ln != nil && c.ln.tls != nil) {
		switch c.awaitHello() {
		case parked:
			resting = true // the parker owns the connection now
			return
		case closeIt:
			return
		}
		if !c.handshake() {
			return
		}
		if c.state.NegotiatedProtocol == "h2" {
			resting = true // runH2 owns the connection now
			go c.runH2(nil)
			return
		}
	}
	for {
		switch c.readRequest() {
		case closeIt:
			return
		case speakH2:
			if prefix, ok := c.takePreface(); ok {
				resting = true // runH2 owns the connection now
				go c.runH2(prefix)
			}
			return
		case parked:
			resting = true // the parker owns the connection now
			return
		}
		if !c.s.serve() {
			return
		}
		// Draining, a connection whose answer kept it alive ends in
		// awaitRequest (drainWaiting).
	}
}

// readFirst reads what the socket of a plain connection holds when its
// goroutine starts, without waiting: a new connection's first request has
// most often come by the time it is accepted (a client sends it right
// after the handshake), and a parked one is woken by bytes. Read here,
// they are served without a wait for the next request: no read deadline
// set, no mark of the connection as idle. Whatever else the read finds
// (nothing, the client's close, an expired deadline) is left for that
// wait to find again.
func (c *conn) readFirst() {
	c.r.FillWith(c.ready.Reader(), 0)
	// Empty lines before a request are skipped (RFC 9112 §2.2), as
	// ServeInline skips them: a connection that sent only those is still
	// waiting for a request, not in the middle of one.
	c.r.HasHead(true)
	if c.r.Buffered() == 0 {
		c.r.Release()
	}
}

// readRequest waits for the next request head (idle timeout), reads it
// (header timeout, counted from its first byte) and parses it into c.s. It
// answers a malformed head itself. A connection that stays idle past
// parkAfter is handed to the parker, and its goroutine ends. While it
// waits, requests that need nothing more from the client are served
// inline (see ServeInline).
func (c *conn) readRequest() next {
	if c.r.Buffered() == 0 {
		if n := c.awaitRequest(); n != readHead {
			return n
		}
	}
	return c.takeRequest()
}

// awaitRequest waits for bytes of a request, holding no buffer. It returns
// readHead when bytes have come, serveIt when ServeInline left a request
// in c.s, closeIt or parked.
func (c *conn) awaitRequest() next {
	if !c.beginIdle() {
		return c.drainWaiting()
	}
	for {
		c.left = readHead
		err := c.ready.FillIdle()
		c.setIdle(false)
		if err == nil {
			if c.drainNext {
				c.drainNext = false
				return c.drainWaiting()
			}
			return c.left
		}
		if isTimeout(err) && c.srv.Draining() {
			return c.drainWaiting()
		}
		if !isTimeout(err) || !c.parkDue {
			// Closed, reset, or idle too long: nothing had begun, so
			// nothing is owed.
			return closeIt
		}
		// parkAfter has passed: park, or wait on with the goroutine.
		c.parkDue = false
		if c.park(c.idleEnd) {
			return parked
		}
		if !c.idleUntil(c.idleEnd) {
			return closeIt
		}
	}
}

// drainWaiting is the end of a wait for the next request as the server
// drains, and of a request answered as the drain began whose answer kept
// the connection alive. A request whose bytes have come is read and
// served, its answer closing the connection. Otherwise the connection gets drainIdleGrace
// for one: a client that was busy on it a moment ago is likely sending its
// next request as the drain begins, and closed under that request, the
// connection would be reset and the client could not tell whether the
// request was processed. A connection that stays quiet for the grace, or
// that had been idle for long (a parked one), is closed: nothing had
// begun, so nothing is owed. That covers the first request of a connection
// accepted as the drain began too (whose bytes are there at accept, on
// Linux).
func (c *conn) drainWaiting() next {
	if c.ready.Pending() {
		return readHead
	}
	if c.drainGraced {
		return closeIt
	}
	c.drainGraced = true
	c.setReadDeadline(clock.Now().Add(drainIdleGrace))
	c.left = readHead
	if err := c.ready.FillIdle(); err == nil {
		if c.drainNext { // a request came and was served inline, kept alive
			c.drainNext = false
			return c.drainWaiting()
		}
		return c.left
	}
	return closeIt
}

// drainIdleGrace is how long a connection waiting for its next request as
// the server drains is given for one (drainWaiting).
const drainIdleGrace = 250 * time.Millisecond

// beginIdle starts a wait for the next request: the connection gives back
// its buffers and Session, and its read deadline becomes the time to park
// (or, without a parker, the idle timeout). It reports false when the
// server is draining.
func (c *conn) beginIdle() bool {
	c.r.Release()
	c.giveBack()
	srv := c.srv
	now := clock.Now()
	c.idleEnd = now.Add(srv.idleTimeout())
	c.parkDue = srv.parker != nil && srv.idleTimeout() > parkAfter
	if c.parkDue {
		return c.idleWithin(now.Add(parkAfter), deadlineSlack(parkAfter))
	}
	return c.idleWithin(c.idleEnd, deadlineSlack(srv.idleTimeout()))
}

// ServeInline is called from inside the wait for the next request
// (ready.Socket.FillIdle) each time bytes have come. It serves every request
// in the buffer that needs nothing more from the client (see
// Session.bodyToCome; a small body's rest is read without waiting when the
// socket may hold it) and reports whether the connection is idle again:
// the wait then goes on, and after a read that drained the socket it needs
// no read that would find nothing. When it stops, c.left tells
// awaitRequest what is left to do.
//
// Inside the wait the connection's read lock is held: nothing served
// inline may read from the client through nc.
func (c *conn) ServeInline() bool {
	c.setIdle(false)
	for c.r.HasHead(true) {
		if c.left = c.takeRequest(); c.left != serveIt {
			return false
		}
		rest := c.s.bodyToCome()
		if rest > 0 && !c.ready.Drained() {
			// The head's read filled the buffer: the rest of a small
			// body may be in the socket already. Room for a byte more
			// than the body, so that a read that takes all there is
			// shows the socket drained.
			c.r.FillWith(c.ready.Reader(), c.r.Buffered()+int(rest)+1)
			rest = c.s.bodyToCome()
		}
		if rest != 0 {
			return false // for the serve loop, which can read the rest
		}
		if !c.s.serve() {
			c.left = closeIt
			return false
		}
	}
	if c.r.Buffered() > 0 {
		c.left = readHead // the start of a head: read the rest
		return false
	}
	if !c.beginIdle() {
		c.left, c.drainNext = closeIt, true // drainWaiting, once out of the wait
		return false
	}
	return true
}

// takeRequest reads the request head that has begun in the buffer (within
// the header timeout) and parses it into c.s, answering a malformed one.
func (c *conn) takeRequest() next {
	srv := c.srv
	if !c.r.HasHead(true) {
		// A goroutine the parker started to answer an expired head holds
		// one of its few slots for that until awaitHead returns (after
		// which c may be the parker's again: read the flag first).
		slot := c.answerSlot
		c.answerSlot = false
		n := c.awaitHead()
		if slot {
			srv.answered()
		}
		if n != readHead {
			return n
		}
	}
	c.headBy = time.Time{}
	if isPreface(&c.r) {
		return speakH2
	}
	head, err := c.r.ReadHead(srv.maxHeaderBytes(), true)
	if err != nil {
		// Whole or over the limit, the head is in the buffer: only a
		// malformed one fails here.
		c.session()
		c.borrow()
		c.s.answerBadRequest(err)
		return closeIt
	}
	c.session()
	c.borrow()
	if err := h1.ParseRequest(&c.s.Request, head, srv.maxHeaders()); err != nil {
		c.s.answerBadRequest(err)
		return closeIt
	}
	return serveIt
}

// awaitHead waits for the rest of a request head that has begun, within
// the header timeout counted from its first byte, and returns readHead once
// the buffer holds the whole head or more than a head may have (for
// ReadHead to refuse). A head that came whole never waits here, and needs
// no deadline: every later read from the client sets its own.
//
// While it waits, the bytes so far are stashed in a buffer of their size
// (ready.Socket.FillHead), and when no byte has come for parkAfter the
// connection parks without its goroutine until the next byte or the
// header timeout (then it returns parked). A connection that sends its
// head a byte at a time therefore holds no goroutine and no read buffer
// most of the time, as an idle one holds none.
//
// When the header timeout passes it answers 408 (RFC 9110 §15.5.9); when
// the client closes or resets mid-head, it counts the fault and closes.
func (c *conn) awaitHead() next {
	srv := c.srv
	max := srv.maxHeaderBytes()
	now := clock.Now()
	if c.headBy.IsZero() {
		c.headBy = now.Add(srv.headerTimeout())
	}
	parkAt := now.Add(parkAfter)
	if srv.parker == nil || parkAfter >= srv.headerTimeout() {
		parkAt = c.headBy
	}
	for !c.r.HasHead(true) && c.r.Buffered() < max {
		if !now.Before(c.headBy) {
			return c.headTimeout(os.ErrDeadlineExceeded)
		}
		c.setReadDeadline(minTime(c.headBy, parkAt))
		err := c.ready.FillHead(max)
		now = clock.Now()
		switch {
		case err == nil:
			if parkAt.Before(c.headBy) {
				parkAt = minTime(now.Add(parkAfter), c.headBy) // from the last byte
			}
			continue
		case !isTimeout(err):
			c.headBy = time.Time{}
			srv.clientFault(nil, c.client, InHead, clientErr(err, "reading the request head"))
			return closeIt
		case now.Before(c.headBy) && !srv.Draining() && c.park(c.headBy):
			return parked
		}
		parkAt = c.headBy // could not park: wait on with the goroutine
	}
	return readHead
}

// headTimeout answers a head not completed within the header timeout.
func (c *conn) headTimeout(err error) next {
	began := c.headBy.Add(-c.srv.headerTimeout()) // the head's first byte
	c.headBy = time.Time{}
	c.session()
	c.borrow()
	c.s.Start = began
	c.s.headFault = true
	c.s.answerError(&fault.Error{Kind: fault.ClientTimeout, Source: fault.Downstream, Context: "reading the request head", Cause: err})
	c.s.finish()
	if c.linger && c.lingerParked() {
		// The parker reads what the client still sends, and closes
		// it, with no goroutine waiting: a thousand heads timing out
		// together cost no thousand goroutines.
		return parked
	}
	return closeIt
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sessionPool holds Sessions between requests: a connection borrows one
// when a request begins and gives it back when it goes idle, so idle
// connections hold no request state (heads, attempts, buffers).
var sessionPool = sync.Pool{New: func() any { return new(Session) }}

// session readies c.s for a new request, borrowing a Session if c has none.
func (c *conn) session() *Session {
	if c.s == nil {
		s := sessionPool.Get().(*Session)
		s.c, s.srv, s.down, s.wbuf, s.flight = c, c.srv, c, &c.wbuf, &c.flight
		c.s = s
	}
	c.s.reset()
	return c.s
}

// release gives the Session back.
func (c *conn) release() {
	if c.s != nil {
		c.s.release()
		c.s = nil
	}
}

// idleUntil marks the connection idle until deadline, unless the server is
// draining; it reports false then. Marking and draining are checked under
// one lock with wakeIfIdle, so Shutdown never misses a waiting connection.
func (c *conn) idleUntil(deadline time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.markIdle() {
		return false
	}
	c.setReadDeadline(deadline)
	return true
}

// markIdle marks the connection idle unless the server is draining, and
// reports whether it did. The lock is held.
func (c *conn) markIdle() bool {
	c.idle = !c.srv.Draining()
	return c.idle
}

// idleWithin is idleUntil for the wait for the next request, whose
// deadline may fall up to slack later than by: a deadline set that way is
// kept while it still falls in that window, so that a client sending
// request after request costs one deadline change per slack, not one per
// request (as writeDeadline does for writes).
func (c *conn) idleWithin(by time.Time, slack time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.markIdle() {
		return false
	}
	if late := by.Add(slack); c.readBy.Before(by) || c.readBy.After(late) {
		c.readBy = late
		c.nc.SetReadDeadline(late)
	}
	return true
}

// setReadDeadline sets the read deadline of nc, and forgets the one
// idleWithin set.
func (c *conn) setReadDeadline(t time.Time) {
	c.readBy = time.Time{}
	c.nc.SetReadDeadline(t)
}

func (c *conn) setIdle(idle bool) {
	c.mu.Lock()
	c.idle = idle
	c.mu.Unlock()
}

// wakeIfIdle interrupts the wait for a next request, for Shutdown.
func (c *conn) wakeIfIdle() {
	c.mu.Lock()
	if c.idle {
		c.nc.SetReadDeadline(time.Now())
	}
	c.mu.Unlock()
}

// write sends b to the client within the send timeout (and at most
// deadlineSlack more).
func (c *conn) write(b []byte) error {
	if c.writeBy.IsZero() {
		// No write deadline is set yet (the connection's first answer,
		// often its only one): a write the socket takes whole at once
		// needs none, and the timer it would start costs more than the
		// write.
		n, err := c.ready.WriteNow(b)
		if c.s != nil {
			c.s.BytesOut += int64(n)
		}
		switch {
		case err == nil && n == len(b):
			return nil
		case err != nil && err != ready.ErrWouldBlock:
			return err
		}
		b = b[n:]
	}
	c.writeDeadline()
	n, err := c.nc.Write(b)
	if c.s != nil {
		c.s.BytesOut += int64(n)
	}
	return err
}

// writeDeadline makes sure the write deadline on nc is at least the send
// timeout away.
func (c *conn) writeDeadline() {
	timeout := c.srv.sendTimeout()
	if by := clock.Now().Add(timeout); c.writeBy.Before(by) {
		c.writeBy = by.Add(deadlineSlack(timeout))
		c.nc.SetWriteDeadline(c.writeBy)
	}
}

// Lingering bounds: how long and how much to discard before closing.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 256 << 10
)

func (c *conn) close() {
	c.r.Release()
	c.giveBack()
	if c.earlyp != nil { // a ClientHello that never went to a handshake
		putBuf(c.earlyp)
		c.early, c.earlyp = nil, nil
	}
	if c.reset {
		c.resetNow()
		return
	}
	if sc := c.socket(); c.linger && sc != nil {
		if c.tls != nil {
			c.tls.CloseWrite() // close_notify, when the handshake was done
		}
		sc.CloseWrite()
		sc.SetReadDeadline(time.Now().Add(lingerTime))
		// What the client still sends is read from the socket, past
		// TLS: it is thrown away.
		io.CopyN(io.Discard, sc, lingerBytes)
	}
	c.nc.Close()
}

// resetNow resets the connection (SO_LINGER 0): what the client has is not
// whole. On TLS no close_notify goes first, which would tell the client
// that the stream ended where it was meant to (RFC 8446 §6.1): a response
// cut short would look complete.
func (c *conn) resetNow() {
	if tc := c.tcp(); tc != nil {
		tc.SetLinger(0)
	}
	c.raw.Close()
}

// deadlineSlack is how far past a timeout a lazily moved deadline may
// reach: a sixteenth of it, at most a second (nginx keeps a timer that is
// within 300ms of its new value, for the same reason).
func deadlineSlack(timeout time.Duration) time.Duration {
	return min(timeout/16, time.Second)
}

func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// clientErr classifies a failure reading from or writing to the client.
func clientErr(err error, doing string) *fault.Error {
	kind := fault.ClientClosed
	switch {
	case isTimeout(err):
		kind = fault.ClientTimeout
	case h1.StatusOf(err) != 0:
		return &fault.Error{Kind: fault.BadRequest, Source: fault.Downstream, Status: h1.StatusOf(err), Context: doing, Cause: err}
	case errors.Is(err, io.EOF), errors.Is(err, h1.ErrTruncated):
	}
	return &fault.Error{Kind: kind, Source: fault.Downstream, Context: doing, Cause: err}
}
