// Package fault is sluice's error value: what went wrong (Kind), whose fault
// it was (Source), whether the request may be tried again and why (Retry,
// Why), and what caused it (Cause, Context).
//
// Unlike pingora's three-state retry flag, a fault.Error is never undecided:
// the engine fills in Retry from the facts of the wire before any hook sees
// the error, and a hook can only flip it. The HTTP answer and the RFC 9209
// Proxy-Status error type follow from the Kind.
package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/sluice-proxy/sluice/h1"
)

// Kind says what went wrong.
type Kind uint8

const (
	Internal           Kind = iota // a bug or resource failure inside sluice
	ConnectRefused                 // the upstream refused the connection (RST to SYN)
	ConnectTimeout                 // the connection was not established in time
	ConnectUnreachable             // no route to the upstream's address
	DNS                            // the upstream's name did not resolve
	ConnectionClosed               // the upstream closed the connection (FIN) early
	ConnectionReset                // the upstream reset the connection (RST)
	WriteError                     // writing the request failed otherwise
	WriteTimeout                   // a write to the upstream blocked too long
	ResponseTimeout                // no response head within response_header timeout
	ReadTimeout                    // the response body stalled past the read timeout
	InvalidResponse                // the response head or framing broke HTTP/1.1
	ResponseTooLarge               // the response head was over the limit
	UpstreamStatus                 // the upstream answered with a status the policy retries
	BodyTruncated                  // the response body ended before its framing said
	NoUpstream                     // no server is available to take the request
	NoRoute                        // no route matches the request
	BadRequest                     // the downstream request broke HTTP/1.1
	ClientClosed                   // the client went away
	ClientTimeout                  // the client was too slow
	// Exhausted: sluice itself ran out of a local resource (file
	// descriptors, socket buffers, ephemeral ports) and could not make the
	// upstream connection. Its source is Internally: another server would
	// not help, and it is no server's fault.
	Exhausted
	// Drained: the proxy's drain timeout passed while the request waited
	// for its upstream (Source Internally): sluice shut down.
	Drained
	// TLSHandshake: the TLS handshake with the upstream failed: it closed
	// or reset the connection during the handshake, answered with
	// something that is not TLS, or broke the protocol.
	TLSHandshake
	// TLSAlert: the upstream refused the TLS handshake with an alert (no
	// common version or cipher, a client certificate missing or refused).
	// In TLS 1.3 the server judges the client's certificate after the
	// client has finished its side of the handshake, so the refusal may
	// come on the first read of a new connection, after the request was
	// written; the server's TLS layer never passed it on (retry.Unsent).
	TLSAlert
	// TLSCertificate: the upstream's certificate did not verify (an
	// unknown authority, a name it is not valid for, expired).
	TLSCertificate
	// Refused: an HTTP/2 upstream refused the request's stream before
	// processing any of it (RST_STREAM REFUSED_STREAM, or a GOAWAY whose
	// last stream id is below it: RFC 9113 §8.7). Like a refused
	// connection, it is safe to send again whatever the method, and it is
	// not the server's failure: a graceful GOAWAY is a deploy, a refused
	// stream is load shed.
	Refused
	// Denied: the proxy's own policy refused the request (a route's
	// allow and deny lists, say) before it went anywhere. Its answer is
	// Status when set (429 for a rate limit), else 403.
	Denied
	// ConnectNotFound: the upstream's address names nothing to connect
	// to: a Unix socket whose file does not exist (ENOENT), the socket
	// of a server not started or one whose path is mistyped. Nothing
	// was sent, as with a refused connection.
	ConnectNotFound
)

var kindNames = [...]string{
	Internal:           "internal",
	ConnectRefused:     "connect_refused",
	ConnectTimeout:     "connect_timeout",
	ConnectUnreachable: "connect_unreachable",
	DNS:                "dns_error",
	ConnectionClosed:   "connection_closed",
	ConnectionReset:    "connection_reset",
	WriteError:         "write_error",
	WriteTimeout:       "write_timeout",
	ResponseTimeout:    "response_timeout",
	ReadTimeout:        "read_timeout",
	InvalidResponse:    "invalid_response",
	ResponseTooLarge:   "response_too_large",
	UpstreamStatus:     "upstream_status",
	BodyTruncated:      "body_truncated",
	NoUpstream:         "no_upstream",
	NoRoute:            "no_route",
	BadRequest:         "bad_request",
	ClientClosed:       "client_closed",
	ClientTimeout:      "client_timeout",
	Exhausted:          "local_resources_exhausted",
	Drained:            "drain_timeout",
	TLSHandshake:       "tls_handshake_error",
	TLSAlert:           "tls_alert_received",
	TLSCertificate:     "tls_certificate_error",
	Refused:            "refused_stream",
	Denied:             "denied",
	ConnectNotFound:    "connect_not_found",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Connect reports whether k is a failure to establish the connection, TLS
// included, after which nothing of the request can have reached the
// upstream's HTTP server.
func (k Kind) Connect() bool {
	switch k {
	case ConnectRefused, ConnectTimeout, ConnectUnreachable, ConnectNotFound, DNS, TLSHandshake, TLSAlert, TLSCertificate:
		return true
	}
	return false
}

// TLS reports whether k is a failure of the TLS handshake.
func (k Kind) TLS() bool { return k == TLSHandshake || k == TLSAlert || k == TLSCertificate }

// Timeout reports whether k is one of the upstream timeouts.
func (k Kind) Timeout() bool {
	return k == ConnectTimeout || k == ResponseTimeout || k == WriteTimeout || k == ReadTimeout
}

// Source says whose side the failure came from.
type Source uint8

const (
	Upstream Source = iota
	Downstream
	Internally
)

func (s Source) String() string {
	switch s {
	case Upstream:
		return "upstream"
	case Downstream:
		return "downstream"
	}
	return "internal"
}

// Error is one failure with its retry decision.
type Error struct {
	Kind   Kind
	Source Source
	// Status is the upstream's status for Kind UpstreamStatus, and for a
	// downstream BadRequest the status to answer (400, 414, 431, 501...).
	Status int
	// Retry is the decision whether another try may follow; Why says why, in
	// words fit for a log line ("GET on a reused connection, nothing read").
	Retry bool
	Why   string
	// Context says what sluice was doing ("reading the response head from
	// 10.0.0.1:80").
	Context string
	Cause   error
}

// New returns an Error of kind from source with cause. Retry starts false.
func New(kind Kind, source Source, cause error) *Error {
	return &Error{Kind: kind, Source: source, Cause: cause}
}

// Error prints source, kind, context and the cause chain; a cause that is an
// *Error of the same kind and source does not repeat them.
func (e *Error) Error() string {
	return strings.Join(e.parts(nil, Source(255), Kind(255)), ": ")
}

func (e *Error) parts(p []string, ps Source, pk Kind) []string {
	if e.Source != ps || e.Kind != pk {
		head := e.Source.String() + " " + e.Kind.String()
		if e.Kind == UpstreamStatus && e.Status != 0 {
			head += fmt.Sprintf(" %d", e.Status)
		}
		p = append(p, head)
	}
	if e.Context != "" {
		p = append(p, e.Context)
	}
	if e.Cause != nil {
		if inner, ok := e.Cause.(*Error); ok {
			return inner.parts(p, e.Source, e.Kind)
		}
		p = append(p, e.Cause.Error())
	}
	return p
}

func (e *Error) Unwrap() error { return e.Cause }

// Timeout reports whether the error is a timeout, for net.Error-style checks.
func (e *Error) Timeout() bool { return e.Kind.Timeout() || e.Kind == ClientTimeout }

// Answer returns the status a proxy answers with for an error of kind k
// (RFC 9209 names in ProxyStatus): 504 for upstream timeouts (nginx's
// answer, not pingora's 502), 503 when no server is available, 404 when no
// route matched, 502 for every other upstream failure, the carried status for
// bad requests, 403 (or the carried status) for requests the proxy's policy
// denied, 500 for internal errors.
func (e *Error) Answer() int {
	switch {
	case e.Kind == UpstreamStatus:
		return e.Status
	case e.Kind == BadRequest:
		if e.Status != 0 {
			return e.Status
		}
		return 400
	case e.Kind == Denied:
		if e.Status != 0 {
			return e.Status
		}
		return 403
	case e.Kind == ClientTimeout:
		return 408
	case e.Kind.Timeout():
		return 504
	case e.Kind == NoUpstream, e.Kind == Exhausted, e.Kind == Drained, e.Kind == Refused:
		return 503
	case e.Kind == NoRoute:
		return 404
	case e.Kind == Internal:
		return 500
	}
	return 502
}

// ProxyStatus returns the RFC 9209 error type for the error.
func (e *Error) ProxyStatus() string {
	switch e.Kind {
	case ConnectRefused:
		return "connection_refused"
	case ConnectTimeout:
		return "connection_timeout"
	case ConnectUnreachable:
		return "destination_ip_unroutable"
	case ConnectNotFound:
		// RFC 9209 §2.3.3: the destination cannot be found. A Unix
		// socket has no IP address to be unroutable.
		return "destination_not_found"
	case DNS:
		return "dns_error"
	case ConnectionClosed, ConnectionReset, WriteError:
		return "connection_terminated"
	case WriteTimeout:
		return "connection_write_timeout"
	case ResponseTimeout:
		return "http_response_timeout"
	case ReadTimeout:
		return "connection_read_timeout"
	case InvalidResponse:
		return "http_protocol_error"
	case ResponseTooLarge:
		return "http_response_header_section_size"
	case BodyTruncated:
		return "http_response_incomplete"
	case NoUpstream:
		return "destination_unavailable"
	case NoRoute:
		return "destination_not_found"
	case BadRequest, ClientClosed, ClientTimeout:
		return "http_request_error"
	case UpstreamStatus:
		return "proxy_internal_response"
	case TLSHandshake:
		return "tls_protocol_error"
	case TLSAlert:
		return "tls_alert_received"
	case TLSCertificate:
		return "tls_certificate_error"
	case Refused:
		return "destination_unavailable"
	case Denied:
		return "http_request_denied"
	}
	return "proxy_internal_error"
}

// Phase is the step of an exchange with the upstream at which an error
// happened; it decides how a plain I/O error is classified.
type Phase uint8

const (
	PhaseConnect Phase = iota
	// PhaseHandshake is the TLS handshake, after the TCP connect: its
	// failures are connect failures (TLSHandshake, TLSAlert,
	// TLSCertificate; a timeout is ConnectTimeout).
	PhaseHandshake
	PhaseWrite
	PhaseReadHead
	PhaseReadBody
)

// FromIO classifies an I/O or parse error from the upstream side. A nil err
// gives nil; an *Error is returned unchanged. A failure for want of a local
// resource is Exhausted, from Internally: it says nothing of the upstream.
func FromIO(err error, phase Phase) *Error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return fe
	}
	if k := classify(err, phase); k != Exhausted {
		return New(k, Upstream, err)
	}
	return New(Exhausted, Internally, err)
}

// LocalExhaustion reports whether err says the local system ran out of
// something a connection needs: descriptors for the process (EMFILE) or
// the system (ENFILE), buffer space (ENOBUFS, ENOMEM), or local addresses
// and ports (EADDRNOTAVAIL, when the ephemeral ports are used up).
func LocalExhaustion(err error) bool { return Resource(err) != "" }

// Resource names the local resource err says ran out, for metrics and
// logs: "descriptors" (EMFILE, ENFILE), "memory" (ENOBUFS, ENOMEM) or
// "ports" (EADDRNOTAVAIL); "" when err says none did.
func Resource(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "descriptors"
	case errors.Is(err, syscall.ENOBUFS), errors.Is(err, syscall.ENOMEM):
		return "memory"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "ports"
	}
	return ""
}

func classify(err error, phase Phase) Kind {
	var dnsErr *net.DNSError
	if phase == PhaseHandshake {
		return classifyHandshake(err)
	}
	switch {
	case LocalExhaustion(err):
		return Exhausted
	case errors.As(err, &dnsErr):
		return DNS
	case isTimeout(err):
		switch phase {
		case PhaseConnect:
			return ConnectTimeout
		case PhaseWrite:
			return WriteTimeout
		case PhaseReadHead:
			return ResponseTimeout
		}
		return ReadTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return ConnectRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return ConnectUnreachable
	case phase == PhaseConnect && errors.Is(err, fs.ErrNotExist):
		// connect(2) to a Unix socket path with no file (ENOENT; on
		// Windows, ERROR_FILE_NOT_FOUND and ERROR_PATH_NOT_FOUND).
		return ConnectNotFound
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED):
		return ConnectionReset
	case isAlert(err):
		// A TLS alert after the handshake. One that refuses a handshake,
		// read where the response head was awaited, is TLS 1.3's late
		// verdict on the client's certificate (see TLSAlert); any other
		// aborts the connection as a reset does.
		if a, _ := Alert(err); phase == PhaseReadHead && refusesHandshake(a) {
			return TLSAlert
		}
		return ConnectionReset
	case errors.Is(err, h1.ErrTruncated):
		if phase == PhaseReadBody {
			return BodyTruncated
		}
		return ConnectionClosed
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		return ConnectionClosed
	case errors.Is(err, h1.ErrHeadTooLarge), errors.Is(err, h1.ErrURITooLong), errors.Is(err, h1.ErrTooManyHeaders):
		return ResponseTooLarge
	case h1.StatusOf(err) != 0:
		return InvalidResponse
	case phase == PhaseConnect:
		return ConnectUnreachable
	case phase == PhaseWrite:
		return WriteError
	}
	return ConnectionClosed
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
