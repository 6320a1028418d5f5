package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
)

var errTooManyFiles = syscall.EMFILE

// conn is one client connection. Its goroutine reads a request, serves it,
// and goes back for the next until the client or sluice ends the
// connection. Pipelined requests are answered in order because they are
// served one after the other.
type conn struct {
	srv      *Server
	nc       net.Conn
	r        h1.Reader
	client   string // the client's IP, for X-Forwarded-For and logs
	clientIP netip.Addr
	s        Session
	wbuf     []byte // the write buffer, borrowed (wbufp) while serving
	wbufp    *[]byte

	ready readiness

	// linger is set when sluice answered and is closing while the client
	// may still be sending: the close then waits a moment for the client's
	// bytes, so that they do not turn the close into a reset that could
	// destroy the answer before the client reads it.
	linger bool

	// mu guards idle, set while the goroutine waits for the next request,
	// so that Shutdown can wake exactly those.
	mu   sync.Mutex
	idle bool
}

func newConn(srv *Server, nc net.Conn) *conn {
	c := &conn{srv: srv, nc: nc}
	c.r.Reset(nc)
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		c.clientIP = ta.AddrPort().Addr().Unmap()
		c.client = c.clientIP.String()
	} else if a := nc.RemoteAddr(); a != nil {
		c.client = a.String()
	}
	c.s.c = c
	c.s.srv = srv
	c.ready.init(nc, &c.r)
	return c
}

func (c *conn) serve() {
	defer c.srv.forget(c)
	defer c.close()
	defer func() {
		// A bug must not take the process down nor leave the client
		// without an answer it can detect: log it and drop the
		// connection (invariant 6).
		if v := recover(); v != nil {
			c.srv.ErrorLog.Error("internal error serving connection; closing it", "panic", v, "client", c.client,
				"stack", string(debug.Stack()))
			if c.s.Status == 0 {
				c.s.keepAlive = false
				c.s.answerError(&fault.Error{Kind: fault.Internal, Source: fault.Internally, Context: fmt.Sprint("panic: ", v)})
			}
		}
	}()
	for {
		ok := c.readRequest()
		if !ok {
			return
		}
		if !c.s.serve() {
			return
		}
		if c.srv.Draining() {
			return
		}
	}
}

// readRequest waits for the next request head (idle timeout), reads it
// (header timeout, counted from its first byte) and parses it into c.s. It
// answers a malformed head itself and reports false when the connection
// should close.
func (c *conn) readRequest() bool {
	srv := c.srv
	if c.r.Buffered() == 0 {
		// Idle: no request has begun. Hold no buffer while waiting.
		c.r.Release()
		c.giveBack()
		c.setIdle(true)
		if srv.Draining() {
			c.setIdle(false)
			return false
		}
		c.nc.SetReadDeadline(time.Now().Add(srv.idleTimeout()))
		err := c.ready.fillIdle()
		c.setIdle(false)
		if err != nil {
			// Closed, reset, idle too long, or woken by Shutdown:
			// nothing had begun, so nothing is owed.
			return false
		}
	}
	c.nc.SetReadDeadline(time.Now().Add(srv.headerTimeout()))
	head, err := c.r.ReadHead(srv.maxHeaderBytes(), true)
	if err != nil {
		switch {
		case h1.StatusOf(err) != 0:
			c.s.reset()
			c.borrow()
			c.s.answerBadRequest(err)
		case isTimeout(err):
			// RFC 9110 §15.5.9: 408 for a request not completed in time.
			c.s.reset()
			c.borrow()
			c.s.answerError(&fault.Error{Kind: fault.ClientTimeout, Source: fault.Downstream, Context: "reading the request head", Cause: err})
			c.s.finish()
		}
		return false
	}
	c.s.reset()
	c.borrow()
	if err := h1.ParseRequest(&c.s.Request, head, srv.maxHeaders()); err != nil {
		c.s.answerBadRequest(err)
		return false
	}
	return true
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

// write sends b to the client within the send timeout.
func (c *conn) write(b []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(c.srv.sendTimeout()))
	n, err := c.nc.Write(b)
	c.s.BytesOut += int64(n)
	return err
}

// Lingering bounds: how long and how much to discard before closing.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 256 << 10
)

func (c *conn) close() {
	c.r.Release()
	c.giveBack()
	if c.linger {
		if tc, ok := c.nc.(*net.TCPConn); ok {
			tc.CloseWrite()
			c.nc.SetReadDeadline(time.Now().Add(lingerTime))
			io.CopyN(io.Discard, c.nc, lingerBytes)
		}
	}
	c.nc.Close()
}

func isTimeout(err error) bool {
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
