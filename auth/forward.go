package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
)

// Defaults of a ForwardOptions.
const (
	DefaultForwardConnectTimeout  = 2 * time.Second
	DefaultForwardResponseTimeout = 5 * time.Second
	DefaultForwardMaxBody         = 64 << 10
)

// ForwardOptions say where a Forward phase asks and what it passes on.
type ForwardOptions struct {
	// Addr is the authentication service's host:port, or "unix:" and the
	// path of a Unix domain socket. Required.
	Addr string
	// Path is the target asked for, path and query; "" means "/".
	Path string
	// Host is the Host field of the subrequests; "" means Addr
	// ("localhost" for a Unix socket).
	Host string
	// RequestHeaders names the client's fields sent to the service; nil
	// sends all of them but Host, the fields that frame a body or belong
	// to a connection (Content-Length, Transfer-Encoding, Connection,
	// Keep-Alive, TE, Trailer, Upgrade, Expect...) and the X-Forwarded-*
	// fields the subrequest carries itself.
	RequestHeaders []string
	// ResponseHeaders names the fields of the service's 2xx answer that
	// are copied into the request sent upstream, replacing any the client
	// sent under those names (which are removed whatever the service
	// answers: a client cannot pose as the service).
	ResponseHeaders []string
	// ConnectTimeout bounds the connection to the service (0:
	// DefaultForwardConnectTimeout); ResponseTimeout the rest of the
	// exchange, from the subrequest's first byte to the answer's last (0:
	// DefaultForwardResponseTimeout).
	ConnectTimeout, ResponseTimeout time.Duration
	// MaxBody is the largest body of an answer passed to the client (0:
	// DefaultForwardMaxBody); a larger one is a 502.
	MaxBody int64
	// Log receives the failures to reach the service, a line per 10
	// seconds at most; nil means slog.Default().
	Log *slog.Logger
}

// Forward is a route phase that asks an authentication service about
// each request before it goes upstream, as nginx's auth_request and
// Traefik's ForwardAuth do: a GET of the service's path, carrying the
// client's fields (all of them, or those named) and X-Forwarded-Method,
// -Proto, -Host, -Uri and -For, which say what the client asked for and
// who it is, and the request's X-Request-Id. The request's body is not
// sent.
//
// A 2xx answer lets the request through, with the fields of the answer
// named by ResponseHeaders (the user's name, say) in the request sent
// upstream. Any other answer goes to the client as it came, its status,
// fields and body (a 401 with its challenge, a 302 to a login page with
// its cookies); the route's error pages leave it alone (Verbatim). A
// service that cannot be reached, fails, is slower than the timeouts, or
// answers with what is not HTTP, or with a body over MaxBody, lets nothing
// through: the client gets 502 (504 for a timeout, 503 when sluice is out
// of descriptors), with Proxy-Status saying what happened to forward_auth.
// The access log line ends with forward_auth=200 (the service's status),
// or forward_auth=error.
//
// The subrequests are sluice's own HTTP/1.1 (package h1) over connections
// kept in the session's server's pool (its Pool; none without a server),
// under the service's address. A pooled connection found closed before
// any answer came is replaced by a new one, once. A Forward is made by
// NewForward, immutable, and safe for concurrent use.
type Forward struct {
	o        ForwardOptions
	key      string // the pool's key of the service's connections
	request  map[string]bool
	response []string
	limits   pool.Limits
	log      logState
}

// forwardedFields are the fields the subrequest sets itself.
var forwardedFields = []string{"X-Forwarded-Method", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Uri", "X-Forwarded-For"}

// notPassed are the client's fields never sent to the service: the ones
// that frame a body or belong to a connection, and Host.
var notPassed = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "trailer": true, "expect": true,
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true, "upgrade": true,
	"http2-settings": true,
}

// answerDropped are the fields of the service's answer that do not go to
// the client: sluice frames the answer and the client's connection.
var answerDropped = map[string]bool{
	"content-length": true, "transfer-encoding": true, "trailer": true,
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true, "upgrade": true,
}

// NewForward returns the phase asking the service o names.
func NewForward(o ForwardOptions) (*Forward, error) {
	if o.Addr == "" {
		return nil, errors.New("forward_auth: no address")
	}
	if o.Path == "" {
		o.Path = "/"
	}
	if o.Path[0] != '/' || strings.ContainsFunc(o.Path, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '#' }) {
		return nil, fmt.Errorf("forward_auth: path %q: a path (and query) starting with /, visible ASCII, no #", o.Path)
	}
	if o.Host == "" {
		o.Host = o.Addr
		if _, unix := sock.UnixPath(o.Addr); unix {
			o.Host = "localhost"
		}
	}
	if !h1.ValidValue(o.Host) {
		return nil, fmt.Errorf("forward_auth: host %q is not a field value", o.Host)
	}
	f := &Forward{o: o, key: o.Addr + "|forward_auth"}
	if o.RequestHeaders != nil {
		f.request = map[string]bool{}
		for _, n := range o.RequestHeaders {
			if !h1.ValidName(n) {
				return nil, fmt.Errorf("forward_auth: request header %q is not a field name", n)
			}
			if notPassed[strings.ToLower(n)] {
				return nil, fmt.Errorf("forward_auth: request header %s is not the client's to pass on", n)
			}
			f.request[strings.ToLower(n)] = true
		}
	}
	for _, n := range o.ResponseHeaders {
		if !h1.ValidName(n) {
			return nil, fmt.Errorf("forward_auth: response header %q is not a field name", n)
		}
		if notPassed[strings.ToLower(n)] || answerDropped[strings.ToLower(n)] {
			return nil, fmt.Errorf("forward_auth: response header %s cannot be copied into a request", n)
		}
		f.response = append(f.response, n)
	}
	if f.o.ConnectTimeout <= 0 {
		f.o.ConnectTimeout = DefaultForwardConnectTimeout
	}
	if f.o.ResponseTimeout <= 0 {
		f.o.ResponseTimeout = DefaultForwardResponseTimeout
	}
	if f.o.MaxBody <= 0 {
		f.o.MaxBody = DefaultForwardMaxBody
	}
	f.limits = pool.Limits{MaxIdle: 16, IdleTimeout: 30 * time.Second}
	return f, nil
}

// answer is what the service answered.
type answer struct {
	resp h1.Response
	body []byte
}

// RequestFilter asks the service about the request: nil lets it through
// (with the answer's named fields in it), anything else answers it.
func (f *Forward) RequestFilter(s *proxy.Session) *proxy.Response {
	// A client cannot send what the service would vouch for.
	for _, n := range f.response {
		s.Request.Header.Del(n)
	}
	a, err := f.ask(s)
	if err != nil {
		s.Note("forward_auth", "error")
		f.logFailure(s, err)
		return f.failure(s, err)
	}
	s.Note("forward_auth", strconv.Itoa(a.resp.Status))
	if a.resp.Status >= 200 && a.resp.Status < 300 {
		for _, n := range f.response {
			for i := 0; i < a.resp.Header.Len(); i++ {
				if h1.EqualFold(a.resp.Header.Name(i), n) {
					s.Request.Header.AddBytes(a.resp.Header.Name(i), a.resp.Header.Value(i))
				}
			}
		}
		return nil
	}
	r := &proxy.Response{Status: a.resp.Status, Body: a.body}
	for i := 0; i < a.resp.Header.Len(); i++ {
		if name := a.resp.Header.Name(i); !answerDropped[strings.ToLower(string(name))] {
			r.Header.AddBytes(name, a.resp.Header.Value(i))
		}
	}
	return r
}

// Verbatim reports whether r is the service's answer, which goes to the
// client as it came, rather than sluice's own failure to ask it (which
// error pages may be given).
func (f *Forward) Verbatim(r *proxy.Response) bool {
	ps := string(r.Header.Get("Proxy-Status"))
	return !strings.HasPrefix(ps, "sluice; ") || !strings.Contains(ps, `details="forward_auth `)
}

// subrequest appends the head of the subrequest for s's request.
func (f *Forward) subrequest(dst []byte, s *proxy.Session) []byte {
	req := &s.Request
	dst = append(dst, "GET "...)
	dst = append(dst, f.o.Path...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, f.o.Host...)
	dst = append(dst, "\r\n"...)
	h := &req.Header
	for i := 0; i < h.Len(); i++ {
		name := h.Name(i)
		lower := strings.ToLower(string(name))
		if notPassed[lower] || isForwarded(lower) || lower == "x-request-id" || (f.request != nil && !f.request[lower]) {
			continue
		}
		dst = append(dst, name...)
		dst = append(dst, ": "...)
		dst = append(dst, h.Value(i)...)
		dst = append(dst, "\r\n"...)
	}
	scheme := "http"
	if s.TLS != nil {
		scheme = "https"
	}
	dst = append(dst, "X-Forwarded-Method: "...)
	dst = append(dst, req.Method()...)
	dst = append(dst, "\r\nX-Forwarded-Proto: "...)
	dst = append(dst, scheme...)
	dst = append(dst, "\r\nX-Forwarded-Host: "...)
	dst = append(dst, req.Header.Get("Host")...)
	dst = append(dst, "\r\nX-Forwarded-Uri: "...)
	dst = append(dst, req.Target()...)
	if s.Client != "" {
		dst = append(dst, "\r\nX-Forwarded-For: "...)
		dst = append(dst, s.Client...)
	}
	if id := s.RequestID(); len(id) > 0 {
		// The request's id, as the upstream will get it: the service's
		// log lines and sluice's name the same request.
		dst = append(dst, "\r\n"+proxy.RequestIDHeader+": "...)
		dst = append(dst, id...)
	}
	return append(dst, "\r\n\r\n"...)
}

func isForwarded(lower string) bool {
	for _, n := range forwardedFields {
		if strings.EqualFold(n, lower) {
			return true
		}
	}
	return false
}

// ask makes the subrequest and reads the answer whole.
func (f *Forward) ask(s *proxy.Session) (*answer, error) {
	head := f.subrequest(make([]byte, 0, 512), s)
	var p *pool.Pool
	if srv := s.Server(); srv != nil {
		p = srv.Pool
	}
	for try := 0; ; try++ {
		var c *pool.Conn
		if p != nil && try == 0 {
			c = p.Get(f.key, nil)
		}
		reused := c != nil
		if c == nil {
			d := net.Dialer{Timeout: f.o.ConnectTimeout, KeepAlive: -1}
			nc, err := sock.Dial(context.Background(), &d, f.o.Addr)
			if err != nil {
				e := fault.FromIO(err, fault.PhaseConnect)
				e.Context = "connecting to " + f.o.Addr
				return nil, e
			}
			c = pool.NewConn(nc, f.key, &f.limits, time.Now())
		}
		a, keep, read, err := f.exchange(c, head, time.Now().Add(f.o.ResponseTimeout))
		switch {
		case err == nil && keep && p != nil:
			c.Served++
			p.Put(c)
		case err == nil:
			c.Close()
		default:
			c.Close()
			if e := (*fault.Error)(nil); reused && read == 0 && errors.As(err, &e) && stale(e) {
				// The service had closed the pooled connection: the
				// subrequest, a GET, goes again on a new one, once.
				p.Dead(c)
				continue
			}
		}
		return a, err
	}
}

// stale reports whether e, on a pooled connection before any byte of an
// answer, is how one its peer had closed fails.
func stale(e *fault.Error) bool {
	return e.Kind == fault.ConnectionClosed || e.Kind == fault.ConnectionReset || e.Kind == fault.WriteError
}

// errBodyTooLarge is an answer's body over MaxBody.
var errBodyTooLarge = errors.New("the answer's body is over forward_auth's max_body")

// exchange sends head on c and reads the answer, by deadline; it reports
// whether c may carry another subrequest, and how many bytes of an answer
// it read.
func (f *Forward) exchange(c *pool.Conn, head []byte, deadline time.Time) (a *answer, keep bool, read int64, err error) {
	c.SetReadDeadline(deadline)
	c.Reader.SetReadTimeout(0)
	n0 := c.Reader.N
	defer func() { read = c.Reader.N - n0 }()
	if _, err := c.Send(head, time.Until(deadline)); err != nil {
		return nil, false, 0, f.fault(err, fault.PhaseWrite)
	}
	a = &answer{}
	for {
		raw, err := c.Reader.ReadHead(64<<10, false)
		if err != nil {
			return nil, false, 0, f.fault(err, fault.PhaseReadHead)
		}
		if err := h1.ParseResponse(&a.resp, raw, 100); err != nil {
			return nil, false, 0, f.fault(err, fault.PhaseReadHead)
		}
		if a.resp.Status >= 200 {
			break
		}
		if a.resp.Status == 101 {
			return nil, false, 0, f.fault(&h1.Error{Status: 502, Msg: "101 Switching Protocols to a GET"}, fault.PhaseReadHead)
		}
		// An interim answer (100, 103): the final one follows.
	}
	fr, reusable, err := h1.ResponseFraming("GET", &a.resp)
	if err != nil {
		return nil, false, 0, f.fault(err, fault.PhaseReadHead)
	}
	var b h1.Body
	b.Init(&c.Reader, fr, true, 4<<10)
	b.Limit(f.o.MaxBody)
	ok := a.resp.Status >= 200 && a.resp.Status < 300
	for {
		seg, err := b.Next()
		if len(seg) > 0 && !ok {
			a.body = append(a.body, seg...)
		}
		if err == io.EOF {
			break
		}
		if errors.Is(err, h1.ErrBodyTooLarge) {
			if ok {
				// Let through: its body was never going anywhere.
				return a, false, 0, nil
			}
			return nil, false, 0, errBodyTooLarge
		}
		if err != nil {
			return nil, false, 0, f.fault(err, fault.PhaseReadBody)
		}
	}
	return a, reusable && h1.KeepAlive(a.resp.Minor, &a.resp.Header), 0, nil
}

// fault classifies an error of the exchange with the service.
func (f *Forward) fault(err error, phase fault.Phase) *fault.Error {
	e := fault.FromIO(err, phase)
	e.Context = "asking " + f.o.Addr
	return e
}

// failure is the answer to a request the service could not be asked
// about: nothing goes through.
func (f *Forward) failure(s *proxy.Session, err error) *proxy.Response {
	var e *fault.Error
	kind := "http_response_body_size"
	status := 502
	if errors.As(err, &e) {
		s.Err = e
		kind, status = e.ProxyStatus(), e.Answer()
	} else {
		s.Err = &fault.Error{Kind: fault.InvalidResponse, Source: fault.Upstream, Context: "asking " + f.o.Addr, Cause: err}
	}
	r := &proxy.Response{Status: status,
		Body: []byte(strconv.Itoa(status) + " " + h1.StatusText(status) + " (forward_auth: " + kind + ")\n")}
	r.Header.Add("Content-Type", "text/plain; charset=utf-8")
	r.Header.Add("Cache-Control", "no-store")
	r.Header.Add("Proxy-Status", "sluice; error="+kind+`; details="forward_auth `+f.o.Addr+`"`)
	return r
}

// logEvery is the least time between two log lines of a Forward about
// its service failing.
const logEvery = 10 * time.Second

// logState keeps a Forward's log lines to one per logEvery.
type logState struct {
	mu         sync.Mutex
	next       time.Time
	suppressed int
}

// logFailure logs a failure to ask the service, unless one was logged
// less than logEvery ago: then it is counted, and the next line says how
// many were left out.
func (f *Forward) logFailure(s *proxy.Session, err error) {
	now := time.Now()
	l := &f.log
	l.mu.Lock()
	if now.Before(l.next) {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	left := l.suppressed
	l.suppressed, l.next = 0, now.Add(logEvery)
	l.mu.Unlock()
	log := f.o.Log
	if log == nil {
		log = slog.Default()
	}
	log.Error("forward_auth: the authentication service failed; the request is refused",
		"service", f.o.Addr, "error", err, "request_id", string(s.RequestID()), "failures_not_logged", left)
}
