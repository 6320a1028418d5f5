package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/upgrade"
)

// socket is one listening socket of the process, bound once (or inherited
// from the process an upgrade replaced) and kept across reloads: one
// server at a time accepts on it, and a reload that starts a new server
// hands it over without closing it, so that no client is refused.
type socket struct {
	address string // as the config file spells it
	ln      *net.TCPListener
	// serving is the accept loop on the socket; nil when none runs.
	serving *handoff
}

// bind returns the socket for address: the one inherited from the process
// this one replaces when there is (in), else a new one.
func bind(address string, in *upgrade.Inherited) (*socket, error) {
	ln, ok, err := in.Take(address)
	if err != nil {
		return nil, err
	}
	if !ok {
		if ln, err = proxy.Listen(address); err != nil {
			return nil, listenError(address, err)
		}
	}
	tl, isTCP := ln.(*net.TCPListener)
	if !isTCP {
		ln.Close()
		return nil, fmt.Errorf("%s: not a TCP listener", address)
	}
	return &socket{address: address, ln: tl}, nil
}

// listenError says why address could not be listened on in the words an
// operator acts on, "listen 127.0.0.1:80: address already in use", instead
// of the system call's chain ("listen tcp 127.0.0.1:80: bind: ..."). The
// cause stays wrapped for errors.Is.
func listenError(address string, err error) error {
	why := err.Error()
	var errno syscall.Errno
	if errors.As(err, &errno) {
		why = errno.Error()
		switch {
		case errno == syscall.EACCES && privilegedPort(address):
			why = "permission denied: ports below 1024 need root or CAP_NET_BIND_SERVICE"
		case errno == syscall.EADDRNOTAVAIL:
			why = "cannot assign requested address: no interface of this host has it"
		}
	}
	return &bindError{msg: "listen " + address + ": " + why, err: err}
}

// privilegedPort reports whether address is host:port with a port below
// 1024 (and not 0, which the kernel picks).
func privilegedPort(address string) bool {
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 1024
}

// bindError is listenError's result.
type bindError struct {
	msg string
	err error
}

func (e *bindError) Error() string { return e.msg }
func (e *bindError) Unwrap() error { return e.err }

// errHandedOver ends a server's accept loop on a socket handed to another
// server, or closed.
var errHandedOver = errors.New("listening socket handed over")

// handoff is the listener one server's accept loop (proxy.Server.Serve)
// sees: closing it, as the loop does on return and Shutdown does, ends the
// loop and leaves the socket open. Accept wakes up through a deadline in
// the past, which the socket's owner clears once the loop has returned
// (socket.stop), before another loop accepts.
type handoff struct {
	ln       *net.TCPListener
	once     sync.Once
	stopping atomic.Bool
	done     chan struct{} // closed when the accept loop has returned
}

func (h *handoff) Accept() (net.Conn, error) {
	c, err := h.ln.Accept()
	if err != nil && h.stopping.Load() {
		return nil, errHandedOver
	}
	return c, err // a connection accepted as Close came is served all the same
}

func (h *handoff) Close() error {
	h.once.Do(func() {
		h.stopping.Store(true)
		h.ln.SetDeadline(time.Unix(1, 0))
	})
	return nil
}

func (h *handoff) Addr() net.Addr { return h.ln.Addr() }

// serve starts srv's accept loop on s with opts; a loop that ends for
// another reason than a handover or a shutdown sends its error to failed.
func (s *socket) serve(srv *proxy.Server, opts proxy.ListenerOptions, failed chan<- error) {
	h := &handoff{ln: s.ln, done: make(chan struct{})}
	s.serving = h
	go func() {
		defer close(h.done)
		err := srv.ServeWith(h, opts)
		if err != nil && !errors.Is(err, errHandedOver) && !errors.Is(err, proxy.ErrServerClosed) {
			select {
			case failed <- fmt.Errorf("%s: %w", s.address, err):
			default:
			}
		}
	}()
}

// stop ends the accept loop on s, if one runs, and returns once it has
// returned; the socket stays open, its queue of connections kept for the
// next loop.
func (s *socket) stop() {
	h := s.serving
	if h == nil {
		return
	}
	h.Close()
	<-h.done
	s.serving = nil
	s.ln.SetDeadline(time.Time{})
}

// close stops the accept loop and closes the socket.
func (s *socket) close() {
	s.stop()
	s.ln.Close()
}

// SyscallConn is the socket's, for the accept loop's own accepts when
// the process is out of descriptors (proxy's shedding).
func (h *handoff) SyscallConn() (syscall.RawConn, error) { return h.ln.SyscallConn() }
