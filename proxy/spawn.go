package proxy

import (
	"io"
	"net"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// A spawned request (Session.Spawn) runs through the main line as any
// other, from the same client, with no one to answer: its downstream
// (nobody) reads an empty request body and throws the response away, so
// that only its tees see the response. A cache revalidates a stale
// response so while the stale copy answers the client
// (stale-while-revalidate), as pingora's subrequests and nginx's
// proxy_cache_background_update do.

// Spawn runs req, a copy of it, as a request of its own from the same
// client (address, TLS state, listener), with no body, on a goroutine of
// its own, through the same Handler: its hooks see it as they see any
// request, and Spawned reports true for it. Its response is read whole
// and thrown away; prepare, called on the new Session before any hook,
// installs what should see it (Tee, SetValue). It is logged as any
// request. Spawn reports false, and runs nothing, when the server is
// draining. Shutdown waits for spawned requests as for any other, and
// the drain timeout cuts them.
func (s *Session) Spawn(req *h1.Request, prepare func(*Session)) bool {
	srv := s.srv
	srv.mu.Lock()
	if srv.Draining() {
		srv.mu.Unlock()
		return false
	}
	n := &nobody{}
	srv.spawned[n] = struct{}{}
	srv.wg.Add(1)
	srv.mu.Unlock()
	c := &conn{srv: srv, client: s.c.client, clientIP: s.c.clientIP, state: s.c.state, ln: s.c.ln, trusted: s.c.trusted}
	sub := sessionPool.Get().(*Session)
	sub.c, sub.srv, sub.down, sub.wbuf, sub.flight = c, srv, n, &n.wbuf, &n.flight
	sub.reset()
	sub.Request.CopyFrom(req)
	sub.Request.Minor = 1
	for _, name := range [...]string{"Content-Length", "Transfer-Encoding", "Expect"} {
		sub.Request.Header.Del(name)
	}
	sub.spawned = true
	n.s = sub
	if prepare != nil {
		prepare(sub)
	}
	go func() {
		defer func() {
			srv.mu.Lock()
			delete(srv.spawned, n)
			srv.mu.Unlock()
			srv.wg.Done()
			sub.release()
		}()
		sub.serve()
	}()
	return true
}

// Spawned reports whether the request was spawned by another (Spawn): no
// client waits for its answer.
func (s *Session) Spawned() bool { return s.spawned }

// SetValue keeps value under key for the rest of the request, for a
// phase's own state from one hook to the next (Ctx is the Handler's); a
// later SetValue with the same key replaces it. Keys should be values of
// a type of the phase's own, as context keys are.
func (s *Session) SetValue(key, value any) {
	for i := range s.values {
		if s.values[i].key == key {
			s.values[i].value = value
			return
		}
	}
	s.values = append(s.values, keyValue{key, value})
}

// Value returns what SetValue kept under key, or nil.
func (s *Session) Value(key any) any {
	for i := range s.values {
		if s.values[i].key == key {
			return s.values[i].value
		}
	}
	return nil
}

type keyValue struct{ key, value any }

// nobody is the downstream of a spawned request: no body comes from it,
// and what goes to it is thrown away.
type nobody struct {
	s      *Session
	wbuf   []byte
	flight flight
}

func (n *nobody) framing(h1.Framing) h1.Framing       { return h1.Framing{Kind: h1.NoBody} }
func (n *nobody) body(h1.Framing) requestBody         { return emptyBody{} }
func (n *nobody) interim(*h1.Response) error          { return nil }
func (n *nobody) takesChunked() bool                  { return false }
func (n *nobody) respond(*h1.Response, outBody)       {}
func (n *nobody) buffer([]byte)                       {}
func (n *nobody) held() int                           { return 0 }
func (n *nobody) send([]byte, bool, *h1.Header) error { return nil }
func (n *nobody) sendFile(*FileBody) error            { return nil }
func (n *nobody) tunnel(*h1.Response, net.Conn, []byte) error {
	return io.ErrClosedPipe
}
func (n *nobody) abort()     {}
func (n *nobody) gone() bool { return false }

// emptyBody is a request body that has ended before it began.
type emptyBody struct{}

func (emptyBody) next() ([]byte, error)     { return nil, io.EOF }
func (emptyBody) data() bool                { return true }
func (emptyBody) ready() bool               { return true }
func (emptyBody) done() bool                { return true }
func (emptyBody) buffered() int             { return 0 }
func (emptyBody) addTrailers(*h1.Header)    {}
func (emptyBody) framed() bool              { return false }
func (emptyBody) limit(int64)               {}
func (emptyBody) setReadDeadline(time.Time) {}
func (emptyBody) prefetch(int64)            {}
func (emptyBody) mustDrain() bool           { return false }
