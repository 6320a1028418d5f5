package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/upgrade"
	"github.com/sluice-proxy/sluice/upgrade/quicshare"
)

// socket is one listening socket of the process, bound once (or inherited
// from the process an upgrade replaced) and kept across reloads: one
// server at a time accepts on it, and a reload that starts a new server
// hands it over without closing it, so that no client is refused.
type socket struct {
	address string // as the config file spells it
	ln      listener
	mode    fs.FileMode // a Unix socket's file mode; 0 for TCP
	// serving is the accept loop on the socket; nil when none runs.
	serving *handoff
	// udp is the HTTP/3 socket at the same address, when the listener
	// serves h3 (bound once, kept across reloads, handed over in an
	// upgrade as the TCP one is, and shared with the new process while
	// this one drains: see quicshare); quic is QUIC on it, and
	// quicServing the Server taking its connections now. retired is the
	// HTTP/3 socket of a listener that a reload kept without h3, open
	// until the old server drains, unless a later reload takes it back.
	udp         *quicshare.Conn
	quic        *proxy.QUICSocket
	quicServing *quicServe
	retired     *retiredQUIC
}

// retiredQUIC is the HTTP/3 socket of a listener that a reload kept
// without h3: it takes no new connection, and closes once the server that
// served on it has drained (close), unless a later reload that serves h3
// on the listener again takes it back first (take). Its methods are safe
// for concurrent use: the drain runs in the background.
type retiredQUIC struct {
	mu   sync.Mutex
	quic *proxy.QUICSocket
	udp  *quicshare.Conn
	done bool // closed or taken back
}

// close closes the socket, unless taken back.
func (r *retiredQUIC) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	r.quic.Close()
	r.udp.Close()
}

// take returns the socket, unless closed.
func (r *retiredQUIC) take() (*proxy.QUICSocket, *quicshare.Conn, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil, nil, false
	}
	r.done = true
	return r.quic, r.udp, true
}

// open reports whether the socket is neither closed nor taken back.
func (r *retiredQUIC) open() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.done
}

// quicServe is one Server's accept loop on a socket's QUIC.
type quicServe struct {
	h    proxy.QUICListener
	done chan struct{}
}

// udpSocket is the name a listener's HTTP/3 socket is handed over under
// in an upgrade: "udp " and the listen address; relaySocket the name of
// the relay by which the old process passes on the datagrams of the new
// one's connections while it drains (quicshare).
const (
	udpSocket   = "udp "
	relaySocket = "udp-relay "
)

// bindUDP binds the listener's HTTP/3 socket, unless bound (or retired by
// a reload and still open: serveQUIC takes it back): the one inherited
// from the process an upgrade replaced when there is one (in), with the
// relay from it, else a new one on the TCP socket's address and port as
// bound (so that a port 0 gets the same number for both).
func (s *socket) bindUDP(in *upgrade.Inherited) error {
	if s.udp != nil || s.retired != nil && s.retired.open() {
		return nil
	}
	pc, inherited, err := in.TakePacket(udpSocket + s.address)
	if err != nil {
		return err
	}
	if !inherited {
		if pc, err = net.ListenPacket("udp", s.ln.Addr().String()); err != nil {
			return listenError("udp "+s.address, err)
		}
	}
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return fmt.Errorf("%s: the inherited HTTP/3 socket is not UDP", s.address)
	}
	var from *net.UnixConn
	if f, ok := in.TakeFile(relaySocket + s.address); ok && inherited {
		if from, err = quicshare.FromFile(f); err != nil {
			uc.Close()
			return fmt.Errorf("%s: HTTP/3: %w", s.address, err)
		}
	} else if ok {
		f.Close()
	}
	c, err := quicshare.New(uc, from)
	if err != nil {
		uc.Close()
		if from != nil {
			from.Close()
		}
		return fmt.Errorf("%s: HTTP/3: %w", s.address, err)
	}
	s.udp = c
	return nil
}

// serveQUIC starts srv's accept loop on s's QUIC, made on its UDP socket
// with opts the first time, else given opts (a reload's); a socket a
// reload retired is taken back, or bound again once closed.
func (s *socket) serveQUIC(srv *proxy.Server, qopts proxy.QUICOptions, opts proxy.ListenerOptions, failed chan<- error) error {
	if r := s.retired; r != nil && s.udp == nil {
		s.retired = nil
		if q, udp, ok := r.take(); ok {
			s.quic, s.udp = q, udp
		}
	}
	if err := s.bindUDP(nil); err != nil {
		return err
	}
	if s.quic == nil {
		qopts.ConnectionIDs, qopts.Mark = s.udp.IDs(), s.udp.Mark
		q, err := proxy.ListenQUIC(s.udp, qopts)
		if err != nil {
			return fmt.Errorf("%s: HTTP/3: %w", s.address, err)
		}
		s.quic = q
	} else if err := s.quic.Set(qopts); err != nil {
		return fmt.Errorf("%s: HTTP/3: %w", s.address, err)
	}
	qs := &quicServe{h: s.quic.Handoff(), done: make(chan struct{})}
	s.quicServing = qs
	go func() {
		defer close(qs.done)
		err := srv.ServeQUIC(qs.h, opts)
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, proxy.ErrServerClosed) {
			select {
			case failed <- fmt.Errorf("%s (HTTP/3): %w", s.address, err):
			default:
			}
		}
	}()
	return nil
}

// listener is a listening socket sluice binds: a *net.TCPListener, or a
// *net.UnixListener for a "unix:PATH" address.
type listener interface {
	net.Listener
	SetDeadline(time.Time) error
	SyscallConn() (syscall.RawConn, error)
}

// bind returns the socket for address (a Unix socket's of mode): the one
// inherited from the process this one replaces when there is (in), else
// a new one.
func bind(address string, mode fs.FileMode, in *upgrade.Inherited) (*socket, error) {
	ln, err := listen(address, mode, in, "", proxy.Listen)
	if err != nil {
		return nil, err
	}
	l, ok := ln.(listener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("%s: not a TCP or Unix socket listener", address)
	}
	return &socket{address: address, ln: l, mode: mode}, nil
}

// listen returns a listener on address, a host:port (listened on with tcp)
// or "unix:PATH" (a socket of mode, a stale file removed first: see
// sock.ListenUnix): the socket inherited from the process this one
// replaces when there is one (in; handed over under name+address), given
// mode, else a new one.
//
// A Unix socket's file is removed when its listener closes, if this
// process owns it: one bound here does from the start, one inherited once
// the process serves (own), so that a start that fails leaves the file to
// the old process, which still accepts on it. An upgrade hands the sockets
// over and closes them without removing the files (disown).
func listen(address string, mode fs.FileMode, in *upgrade.Inherited, name string, tcp func(string) (net.Listener, error)) (net.Listener, error) {
	ln, inherited, err := in.Take(name + address)
	if err != nil {
		return nil, err
	}
	path, unix := sock.UnixPath(address)
	switch {
	case inherited && unix:
		if err := os.Chmod(path, mode.Perm()); err != nil {
			ln.Close()
			return nil, fmt.Errorf("%s: %w", address, err)
		}
	case inherited:
	case unix:
		if ln, err = sock.ListenUnix(path, mode); err != nil {
			return nil, listenError(address, err)
		}
	default:
		if ln, err = tcp(address); err != nil {
			return nil, listenError(address, err)
		}
	}
	return ln, nil
}

// own makes ln, when a Unix socket's listener, remove its file when
// closed: this process serves on it now.
func own(ln net.Listener) {
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(true)
	}
}

// disown makes ln, when a Unix socket's listener, leave its file when
// closed: the new process of an upgrade serves on it.
func disown(ln net.Listener) {
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
}

// setMode gives a Unix socket's file the mode a reload asks for.
func (s *socket) setMode(mode fs.FileMode) error {
	path, unix := sock.UnixPath(s.address)
	if !unix || mode == s.mode {
		return nil
	}
	if err := os.Chmod(path, mode.Perm()); err != nil {
		return err
	}
	s.mode = mode
	return nil
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
	ln       listener
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
	if qs := s.quicServing; qs != nil {
		// The Server's connections stay on the socket's Transport, to
		// finish as its Shutdown has them.
		qs.h.Close()
		<-qs.done
		s.quicServing = nil
	}
	h := s.serving
	if h == nil {
		return
	}
	h.Close()
	<-h.done
	s.serving = nil
	s.ln.SetDeadline(time.Time{})
}

// close stops taking connections on s (unlistenQUIC, stop) and closes
// its TCP socket; its HTTP/3 socket stays open for the connections on it
// (closeQUIC).
func (s *socket) close() {
	s.unlistenQUIC(nil)
	s.stop()
	s.ln.Close()
}

// unlistenQUIC makes s's HTTP/3 socket take no new connection, at once
// (handshakes under way refused) or, with idle, once no handshake is
// under way or idle is done; and returns once the accept loop on it, if
// one runs, has taken those whose handshake was done and ended: its
// server serves them (with GOAWAY once it drains), where closing the loop
// at once would leave them waiting.
func (s *socket) unlistenQUIC(idle context.Context) {
	if s.quic == nil {
		return
	}
	if idle != nil {
		if s.udp != nil && s.udp.Forwarding() {
			// The datagrams read before the hand-over may hold connection
			// attempts quic-go has not taken up yet: counted as under way
			// only once it has (quicshare's Handled), and refused if it
			// takes them up while it stops listening.
			select {
			case <-s.udp.Handled():
			case <-idle.Done():
			}
		}
		s.quic.UnlistenIdle(idle)
	} else {
		s.quic.Unlisten()
	}
	if qs := s.quicServing; qs != nil {
		<-qs.done
		s.quicServing = nil
	}
}

// retireQUIC takes s's HTTP/3 socket from it, for a reload that keeps the
// listener without h3: no new connection is taken, the accept loop ends
// (unlistenQUIC), and the socket is returned for closing once the server
// that served on it has drained.
func (s *socket) retireQUIC() *retiredQUIC {
	if s.quic == nil {
		return nil
	}
	s.unlistenQUIC(nil)
	r := &retiredQUIC{quic: s.quic, udp: s.udp}
	s.quic, s.udp, s.retired = nil, nil, r
	return r
}

// closeQUIC closes the HTTP/3 socket, if any, once the servers whose
// connections are on it have drained: what is still open on it ends.
func (s *socket) closeQUIC() {
	if s.quic != nil {
		s.quic.Close()
		s.quic = nil
	}
	if s.udp != nil {
		s.udp.Close()
		s.udp = nil
	}
}

// SyscallConn is the socket's, for the accept loop's own accepts when
// the process is out of descriptors (proxy's shedding).
func (h *handoff) SyscallConn() (syscall.RawConn, error) { return h.ln.SyscallConn() }
