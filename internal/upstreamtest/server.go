// Package upstreamtest provides scriptable HTTP/1.1 upstreams for tests of
// the proxy.
//
// A Server is a raw TCP server on 127.0.0.1 (StartTLS: TLS over it;
// StartUnix: on a Unix domain socket instead) that
// reads requests with its own small parser, deliberately independent of the
// proxy's, so that the two cross-check each other. It records every request it reads, byte for byte,
// with the connection and the position on that connection it arrived at, and
// answers (or misbehaves) as its handler says: answer the first request of a
// connection and drop the second, reset, stay silent, send a garbage status
// line, a header without a colon, a truncated body, close idle connections.
//
// The package does not use net/http. Every Server must be closed; Start
// arranges that with t.Cleanup. Close waits for every goroutine the Server
// started, handlers included, so a handler that waits for something must also
// stop waiting when Conn.Done is closed.
package upstreamtest

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a raw TCP HTTP/1.1 upstream for tests. Its methods are safe for
// concurrent use. It must be closed, which Start and StartStreaming arrange
// with t.Cleanup.
type Server struct {
	t   testing.TB
	ln  net.Listener
	h   StreamHandler
	tls *tls.Config // nil: plain TCP

	acc       acceptor
	done      chan struct{} // closed by Close
	closeOnce sync.Once

	mu   sync.Mutex
	reqs []Request
	errs []error
	grew chan struct{} // closed and replaced whenever reqs grows
}

// Start listens on 127.0.0.1:0 and serves every accepted connection with h,
// which sees each request after its whole body has been read. A nil h answers
// every request with an empty 200. Start registers s.Close with t.Cleanup and
// fails the test if it cannot listen.
func Start(t testing.TB, h Handler) *Server {
	t.Helper()
	return StartStreaming(t, h.stream())
}

// StartStreaming is like Start, but h sees each request as soon as its head
// has been read and reads the body itself (see StreamHandler). A nil h
// answers every request with an empty 200.
func StartStreaming(t testing.TB, h StreamHandler) *Server {
	t.Helper()
	return start(t, h, nil)
}

// StartTLS is Start for a server that speaks TLS, configured by cfg, on
// every connection it accepts. When a handshake fails, the server reads and
// discards what the peer sends until it closes, so that the alert refusing
// the handshake reaches the peer rather than a reset. Conn.TLS tells a
// handler how the handshake went.
func StartTLS(t testing.TB, cfg *tls.Config, h Handler) *Server {
	t.Helper()
	return start(t, h.stream(), cfg)
}

// StartUnix is Start on a Unix domain socket in a new directory under
// os.TempDir() (t.TempDir()'s paths can pass the 107 bytes a socket's path
// may have), removed when the test ends. Addr returns "unix:" and the
// socket's path, the form sluice dials.
func StartUnix(t testing.TB, h Handler) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "ut")
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	return serveOn(t, ln, h.stream(), nil)
}

func start(t testing.TB, h StreamHandler, cfg *tls.Config) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	return serveOn(t, ln, h, cfg)
}

func serveOn(t testing.TB, ln net.Listener, h StreamHandler, cfg *tls.Config) *Server {
	if h == nil {
		h = OK("").stream()
	}
	s := &Server{
		t:    t,
		ln:   ln,
		h:    h,
		tls:  cfg,
		done: make(chan struct{}),
		grew: make(chan struct{}),
	}
	s.acc.start(ln, s.serve, func(err error) { t.Logf("upstreamtest: accept: %v", err) })
	t.Cleanup(s.Close)
	return s
}

// Dead returns an address on 127.0.0.1 where nothing listens, so dialing
// it is refused. The port stays reserved until the test ends (see
// reserve), so that no server of a test running beside this one, in this
// process or another, can take it and answer in its place.
func Dead(t testing.TB) string {
	t.Helper()
	addr, release, err := reserve()
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	t.Cleanup(release)
	return addr
}

// Addr returns the address the server listens on, "127.0.0.1:port", or
// "unix:PATH" for a server started by StartUnix.
func (s *Server) Addr() string {
	if a, ok := s.ln.Addr().(*net.UnixAddr); ok {
		return "unix:" + a.Name
	}
	return s.ln.Addr().String()
}

// Close stops accepting, closes every connection and waits until every
// goroutine of the server, handlers included, has returned. It may be called
// more than once, but not from a handler.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.done) })
	s.acc.close()
}

// Accepts returns the number of connections accepted so far.
func (s *Server) Accepts() int { return s.acc.count() }

// Requests returns every request recorded so far, in the order they were
// recorded. A request is recorded when its body has been read to the end,
// or, for a body cut short, when the server stops reading it (Complete is
// then false). A Handler always sees its request already recorded. The
// returned values share memory with the server's records and must not be
// modified.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// Count returns how many recorded requests have the given method and path.
// The path is compared with the request target up to any "?"; an empty
// method matches every method.
func (s *Server) Count(method, path string) int {
	n := 0
	for _, r := range s.Requests() {
		p, _, _ := strings.Cut(r.Target, "?")
		if (method == "" || r.Method == method) && p == path {
			n++
		}
	}
	return n
}

// WaitRequests waits until at least n requests have been recorded or timeout
// has passed, and reports whether n were recorded.
func (s *Server) WaitRequests(n int, timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		got, grew := len(s.reqs), s.grew
		s.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-grew:
		case <-timer.C:
			return false
		}
	}
}

// Errors returns the problems the server met while reading requests, as
// *ReadError values: malformed heads or bodies (errors.Is ErrMalformed) and
// connections that ended inside a request head. A body cut short is not an
// error here; its Request has Complete false. Proxy tests usually assert
// that Errors is empty.
func (s *Server) Errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}

// record stores a copy of r, taken now.
func (s *Server) record(r *Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r.clone())
	close(s.grew)
	s.grew = make(chan struct{})
}

// fail records a read error, unless it only says that Close closed the
// connection under the reader.
func (s *Server) fail(conn, seq int, err error) {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
		return
	}
	e := &ReadError{Conn: conn, Seq: seq, Err: err}
	s.t.Logf("%v", e)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, e)
}
