package proxy

import (
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/retry"
)

// Handler is the one decision a proxy must make: where a request goes.
//
// UpstreamPeer is called before every try of a request, the first and each
// retry; the session's Attempts say which peers were tried and how they
// failed, so a handler can pick another. Returning an error answers the
// client with it: a *fault.Error keeps its kind (NoUpstream gives 503), any
// other error is a 502 bad_gateway with the error in the log.
//
// A Handler may also implement any of the optional hook interfaces below
// (RequestFilter, UpstreamRequestFilter, UpstreamResponseFilter,
// ResponseFilter, AnswerFilter,
// FailToConnect, ErrorWhileProxy, FailToProxy, Logger); the Server checks
// once, at start.
// Hooks are called from the connection's goroutine; a Handler serves many
// connections at once and must be safe for concurrent use.
type Handler interface {
	UpstreamPeer(s *Session) (*Peer, error)
}

// RequestFilter runs once the request head is read and validated, before any
// upstream is chosen. Returning a non-nil Response answers the request with
// it and skips the upstream: an answer must be handed back, so "answered
// but wrote nothing" cannot happen.
type RequestFilter interface {
	RequestFilter(s *Session) *Response
}

// UpstreamRequestFilter may change the head sent upstream, on each try.
// req is a copy of the client's request with hop-by-hop fields removed and
// forwarding fields added.
type UpstreamRequestFilter interface {
	UpstreamRequestFilter(s *Session, peer *Peer, req *h1.Request)
}

// ResponseFilter may change the response head of peer, the server that
// answered, before it goes to the client. Changing the framing fields
// (Content-Length, Transfer-Encoding) does not change how the body is
// forwarded.
type ResponseFilter interface {
	ResponseFilter(s *Session, peer *Peer, resp *h1.Response)
}

// UpstreamResponseFilter sees the final response head of a try that is to
// go to the client, before the tees and the ResponseFilters (pingora's
// upstream_response_filter, which runs before its cache; its
// response_filter, after it, is ResponseFilter here). It runs once per
// request, for the response relayed (a status the retry policy retries is
// seen only when it becomes the answer), never for a Response standing in
// for an upstream's; resp's hop-by-hop fields are removed. It may change
// the head, as ResponseFilter may; and it may answer instead of the
// upstream: a non-nil Response replaces the upstream's (a stored copy of
// one that a 304 just validated, say, or an error page: nginx's
// proxy_intercept_errors), relayed as sluice's own answer or, with
// AsUpstream, through the response phases as an upstream's. The upstream's
// body is not read then: its connection is kept when the response has
// none (a 304, a HEAD's), else closed. The try counts as answered, with
// the upstream's status.
type UpstreamResponseFilter interface {
	UpstreamResponseFilter(s *Session, peer *Peer, resp *h1.Response) *Response
}

// AnswerFilter may change the header fields of an answer sluice makes
// itself, before it is written: an error's (502, 503, 504, 413...), or one
// a RequestFilter or FailToProxy handed back. resp holds the answer's
// status and fields, copied, so the Response handed back is never changed
// and may be shared; a change of resp.Status is ignored, and
// Content-Length, Connection and Transfer-Encoding remain sluice's to set.
// Responses relayed from an upstream are ResponseFilter's, interim (1xx)
// responses neither's. It runs for every answer of a Handler that has it,
// the 400 to a request that broke HTTP/1.1 included (its session may hold
// a partial head then), and must be cheap.
type AnswerFilter interface {
	AnswerFilter(s *Session, resp *h1.Response)
}

// The error hooks below take part in the retry decision after a failed try,
// which has two stages. First the policy (retry.Policy.Allow: the failure's
// condition, the method, the idempotency key) decides, into e.Retry and
// e.Why, never leaving it undecided; the hook sees that decision and the
// facts of the wire it came from (f, a copy), and returns the error to act
// on (nil keeps e), its Retry lifting or imposing a refusal. Then the hard
// limits (retry.Policy.Enforce) apply, and no hook lifts them: a response
// byte already went to the client, the client side failed, the request body
// is no longer held whole, tries are used up, the retry timeout passed, the
// retry budget is empty. A server where a try timed out after the request
// was sent gets no further try of it (Session.Excluded), whatever a hook
// says.

// FailToConnect sees a try that made no connection to peer (refused,
// unreachable, timed out, its TLS handshake failed, or sluice out of
// descriptors or ports). Nothing of the request reached the peer's HTTP
// server, so retrying is safe for any method. (A TLS 1.3 server that
// refuses sluice's client certificate says so only once sluice has written
// the request, which it never passes on: f.Wrote > 0 then.)
type FailToConnect interface {
	FailToConnect(s *Session, peer *Peer, e *fault.Error, f retry.Facts) *fault.Error
}

// ErrorWhileProxy sees a failure after the connection was made, before any
// response byte went to the client. Setting Retry on a request that may
// have been processed (f.Wrote > 0, a method that is not idempotent) risks
// a duplicate: the hook takes that responsibility.
type ErrorWhileProxy interface {
	ErrorWhileProxy(s *Session, peer *Peer, e *fault.Error, f retry.Facts) *fault.Error
}

// FailToProxy chooses the answer for a request that failed for good. A nil
// Response gives the default answer: e.Answer() with a Proxy-Status header.
// It is not called when the response had already started; then the client
// connection is aborted.
type FailToProxy interface {
	FailToProxy(s *Session, e *fault.Error) *Response
}

// TryDone is told how each try ended, once the decision about retrying it
// is taken: for passive health checks and load-aware balancing. It is
// called exactly once after every successful UpstreamPeer call. A.Err is nil
// for a try whose response went to the client whole.
type TryDone interface {
	TryDone(s *Session, a *Attempt)
}

// Logger runs once per request, after the response went out or failed. The
// session is valid until Logging returns.
type Logger interface {
	Logging(s *Session)
}

// Response is an answer the proxy writes itself, or one that stands in for
// an upstream's (AsUpstream).
type Response struct {
	Status int
	// Reason is the reason phrase of an HTTP/1.1 status line; "" means
	// the status's standard one.
	Reason string
	Header h1.Header // Content-Length is set from Body (or File, or Stream's Size)
	Body   []byte
	// File, when set, is the body instead of Body: bytes of an open file,
	// sent as they are read, with sendfile(2) when the client's connection
	// is plain TCP (over TLS or HTTP/2 they are copied). Each write of it
	// is bounded by the send timeout, as every write to a client is. The
	// engine owns the file from the moment the Response is handed to it,
	// and closes it once the answer is written, or has failed, or needs
	// no body (HEAD). A file that yields fewer than File.Size bytes
	// (truncated meanwhile) aborts the response: the client sees a reset,
	// never a short body that looks whole.
	File *FileBody
	// Stream, when set, is the body instead of Body and File: read as it
	// comes (a body still being received elsewhere, say), each piece sent
	// on as it is read. The engine owns it as it owns File.
	Stream *StreamBody
	// Trailers are sent after the body, to a client whose wire carries
	// them (HTTP/1.1 chunked, HTTP/2); an HTTP/1.1 body with trailers goes
	// chunked for them.
	Trailers h1.Header
	// AsUpstream makes the response stand in for an upstream's (a stored
	// copy of one, say): it goes through the response phases as an
	// upstream's does (ResponseFilter, the BodyFilter it installs, the
	// tees), not through those of sluice's own answers (AnswerFilter), and
	// its fields pass as they are but the hop-by-hop ones.
	AsUpstream bool
}

// StreamBody is a response body read from Reader until io.EOF: Size bytes
// when Size >= 0 (fewer aborts the response, as a truncated File does),
// else as many as come (chunked to an HTTP/1.1 client). Reader is closed
// at the end when it is an io.Closer.
type StreamBody struct {
	Reader io.Reader
	Size   int64
}

// FileBody is a response body read from an open file: Size bytes from
// Offset.
type FileBody struct {
	File         *os.File
	Offset, Size int64
}

// bodySize returns r's body's length, -1 when not known ahead.
func (r *Response) bodySize() int64 {
	switch {
	case r.Stream != nil:
		return r.Stream.Size
	case r.File != nil:
		return r.File.Size
	}
	return int64(len(r.Body))
}

// close lets go of r's body's file or stream, if any.
func (r *Response) close() {
	if r.File != nil {
		r.File.File.Close()
	}
	if r.Stream != nil {
		if c, ok := r.Stream.Reader.(io.Closer); ok {
			c.Close()
		}
	}
}

// ResponseTee observes a response as it is relayed (Session.Tee): the
// upstream's, or a Response that stands in for one (AsUpstream), as it
// came, before the response phases change it. Its methods run on the
// request's goroutine between writes to the client, and must not block
// for long; what they are handed is valid only during the call. Exactly
// one of End and Abort is called for a tee that was installed, whatever
// happens to the request.
type ResponseTee interface {
	// Head is the final response head, hop-by-hop fields removed.
	Head(resp *h1.Response)
	// Body is the next piece of the body's data (never its framing).
	Body(p []byte)
	// End: the response came whole, with its trailers (nil: none),
	// whether or not its client took all of it.
	End(trailers *h1.Header)
	// Abort: the request ended without a whole response: no response came
	// (every try failed, or none was made), or it was cut.
	Abort()
}

// Text returns a plain-text Response.
func Text(status int, body string) *Response {
	r := &Response{Status: status, Body: []byte(body)}
	r.Header.Add("Content-Type", "text/plain; charset=utf-8")
	return r
}

// Peer is an upstream server a request can be sent to. Handlers keep their
// Peers for as long as they serve, so that choosing one allocates nothing
// (a TLS peer works out its pool key and TLS config at its first try). A
// Peer's fields must not change once it is in use.
type Peer struct {
	// Addr is the server's host:port, or "unix:" and the path of a Unix
	// domain socket ("unix:/run/gunicorn.sock"). A Unix socket is pooled,
	// health-checked and retried as a TCP server is; a request without a
	// Host goes to it with "Host: localhost".
	Addr string
	// ServerName is the server's name for TLS, when its options make its
	// connections TLS and their config names none: sent as SNI and
	// verified against its certificate. Empty means the host of Addr; a
	// server resolved from a DNS name sets that name. A Unix socket has
	// no host: TLS over one needs a name here or in the TLS config (or
	// InsecureSkipVerify), or its handshake fails saying so.
	ServerName string
	// Upstream names the group the peer belongs to, for logs and metrics.
	Upstream string
	// Options governs connections to the server; nil means the defaults of
	// a zero PeerOptions. It is shared, not copied.
	Options *PeerOptions
	// Tag is free for the handler, e.g. the balancer's server record.
	Tag any

	tls atomic.Pointer[peerTLS] // set at the first try over TLS
}

// host is the Host sent to the peer for a request that has none: its
// address, or "localhost" for a Unix socket.
func (p *Peer) host() string {
	if _, unix := sock.UnixPath(p.Addr); unix {
		return "localhost"
	}
	return p.Addr
}

// PeerOptions are the connection and retry settings of a group of peers.
// The zero value has the documented defaults, the ones the config file
// gives an upstream that sets nothing. Options are read-only once in use.
type PeerOptions struct {
	// ConnectTimeout bounds dialing; 0 means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response head once the
	// request is written; 0 means DefaultResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
	// ReadTimeout bounds each wait for response body bytes; 0 means
	// DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds each write to the upstream; 0 means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Pool limits the idle connections kept for each peer, and says which
	// of them a request that must be sent at most once may take (Once);
	// nil means DefaultPoolLimits, and MaxIdle 0 turns pooling off.
	Pool *pool.Limits
	// Retry is the retry policy; nil means a zero retry.Policy shared by
	// every peer without one.
	Retry *retry.Policy
	// Host, when set, replaces the Host header sent upstream.
	Host string
	// TLS, when set, makes the connections to the peers TLS (see TLS);
	// nil means plain TCP.
	TLS *TLS
	// Protocol is what the peers are spoken to with: ProtocolHTTP11 (""
	// too), ProtocolH2 and ProtocolAuto (both need TLS), or ProtocolH2C.
	// Over HTTP/2, requests from many clients share few connections: a
	// new one is opened only when the open ones are at their server's
	// SETTINGS_MAX_CONCURRENT_STREAMS; Pool's MaxIdle counts connections
	// and its IdleTimeout applies to one with no open stream.
	Protocol string
}

func (o *PeerOptions) protocol() string {
	if o == nil || o.Protocol == "" {
		return ProtocolHTTP11
	}
	return o.Protocol
}

// Defaults of a zero PeerOptions. The response-header timeout is nginx's
// proxy_read_timeout: a view nginx would wait for, sluice waits for.
const (
	DefaultConnectTimeout        = 2 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultReadTimeout           = 60 * time.Second
	DefaultWriteTimeout          = 60 * time.Second
)

// DefaultPoolLimits are the pool limits of peers that set none: 32 idle
// connections per peer, closed after 60s idle; requests that must be sent
// once learn which servers' pooled connections they may take (pool.Learn).
var DefaultPoolLimits = pool.Limits{MaxIdle: 32, IdleTimeout: 60 * time.Second}

func (o *PeerOptions) connectTimeout() time.Duration {
	if o == nil || o.ConnectTimeout <= 0 {
		return DefaultConnectTimeout
	}
	return o.ConnectTimeout
}

func (o *PeerOptions) responseHeaderTimeout() time.Duration {
	if o == nil || o.ResponseHeaderTimeout <= 0 {
		return DefaultResponseHeaderTimeout
	}
	return o.ResponseHeaderTimeout
}

func (o *PeerOptions) readTimeout() time.Duration {
	if o == nil || o.ReadTimeout <= 0 {
		return DefaultReadTimeout
	}
	return o.ReadTimeout
}

func (o *PeerOptions) writeTimeout() time.Duration {
	if o == nil || o.WriteTimeout <= 0 {
		return DefaultWriteTimeout
	}
	return o.WriteTimeout
}

func (o *PeerOptions) policy() *retry.Policy {
	if o == nil {
		return nil
	}
	return o.Retry
}

func (o *PeerOptions) limits() *pool.Limits {
	if o == nil || o.Pool == nil {
		return &DefaultPoolLimits
	}
	return o.Pool
}

// Attempt records one try of a request: where it went, on what connection,
// how far it got, and what was decided after it.
type Attempt struct {
	Peer *Peer
	// Reused is set when the try ran on a pooled connection; IdleAge is how
	// long it had been idle and Served how many requests it had carried.
	Reused  bool
	IdleAge time.Duration
	Served  int
	// StaleResend marks a try that followed a stale pooled connection
	// (retry.Stale): it went on a new connection.
	StaleResend bool
	// Wrote counts the request bytes, head and body, written on this try's
	// connection; Read counts the response bytes read on it.
	Wrote, Read int64
	// Wait is the time from the try's start to its response head (or to
	// its failure): the upstream's latency as a balancer sees it.
	Wait time.Duration
	// Status is the upstream's response status, 0 if none was read.
	Status int
	// Err is the failure, nil for the try that answered. Err.Retry and
	// Err.Why hold the decision taken after it.
	Err      *fault.Error
	Start    time.Time
	Duration time.Duration
}

// Stale reports whether the try failed as a pooled connection that its
// upstream had already closed fails (retry.Stale): the keep-alive race,
// not the server's fault.
func (a *Attempt) Stale() bool { return retry.Stale(a.Reused, a.Read, a.Err) }

// Unsent reports whether nothing of the request can have reached the
// upstream's HTTP server on this try (retry.Facts.Unsent): nothing of it
// was written, the server refused the stream (HTTP/2), or its TLS layer
// refused the connection.
func (a *Attempt) Unsent() bool {
	f := retry.Facts{Err: a.Err, Reused: a.Reused, Wrote: a.Wrote, Read: a.Read}
	return f.Unsent()
}

// Excludes reports whether the try rules its server out for the rest of the
// request (retry.Excludes): it timed out after the request was sent, or the
// server's certificate did not verify, or it refused the TLS handshake.
func (a *Attempt) Excludes() bool { return retry.Excludes(a.Wrote, a.Err) }

// upstreamList formats the attempts the way nginx's $upstream_addr does.
func upstreamList(as []Attempt, field func(*Attempt) string) string {
	if len(as) == 1 {
		return field(&as[0]) // the usual case, without building a string
	}
	var b []byte
	for i := range as {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, field(&as[i])...)
	}
	return string(b)
}

func attemptStatus(a *Attempt) string {
	if a.Status >= 100 && a.Status < len(statusNumbers) {
		return statusNumbers[a.Status]
	}
	if a.Status != 0 {
		return strconv.Itoa(a.Status)
	}
	if a.Err != nil {
		return a.Err.Kind.String()
	}
	return "-"
}

// statusNumbers holds the decimal text of each status code, so that an
// access log line need not format (and allocate) it for every request.
var statusNumbers = func() (t [600]string) {
	for i := 100; i < len(t); i++ {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

func attemptAddr(a *Attempt) string {
	if a.Peer == nil {
		return "-"
	}
	return a.Peer.Addr
}
