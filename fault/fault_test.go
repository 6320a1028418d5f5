package fault

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
)

func TestErrorPrintsChainOnce(t *testing.T) {
	inner := &Error{Kind: ConnectRefused, Source: Upstream, Context: "dial 127.0.0.1:9", Cause: syscall.ECONNREFUSED}
	outer := &Error{Kind: ConnectRefused, Source: Upstream, Context: "peer 127.0.0.1:9", Cause: inner}
	want := "upstream connect_refused: peer 127.0.0.1:9: dial 127.0.0.1:9: connection refused"
	if got := outer.Error(); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if !errors.Is(outer, syscall.ECONNREFUSED) {
		t.Fatal("cause chain not unwrappable")
	}
}

func TestClassify(t *testing.T) {
	timeout := &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		err   error
		phase Phase
		want  Kind
	}{
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, PhaseConnect, ConnectRefused},
		{timeout, PhaseConnect, ConnectTimeout},
		{timeout, PhaseWrite, WriteTimeout},
		{timeout, PhaseReadHead, ResponseTimeout},
		{timeout, PhaseReadBody, ReadTimeout},
		{&net.DNSError{Err: "no such host", Name: "x"}, PhaseConnect, DNS},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, PhaseReadHead, ConnectionReset},
		{io.EOF, PhaseReadHead, ConnectionClosed},
		{io.ErrUnexpectedEOF, PhaseReadHead, ConnectionClosed},
		{&net.OpError{Op: "write", Err: syscall.EPIPE}, PhaseWrite, ConnectionClosed},
		{h1.ErrTruncated, PhaseReadBody, BodyTruncated},
		{&h1.Error{Status: 502, Msg: "header field without a colon"}, PhaseReadHead, InvalidResponse},
		{h1.ErrHeadTooLarge, PhaseReadHead, ResponseTooLarge},
		{fmt.Errorf("wrapped: %w", syscall.EHOSTUNREACH), PhaseConnect, ConnectUnreachable},
		{&net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ENOENT)}, PhaseConnect, ConnectNotFound},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("socket", syscall.EMFILE)}, PhaseConnect, Exhausted},
		{&net.OpError{Op: "dial", Err: syscall.ENFILE}, PhaseConnect, Exhausted},
		{&net.OpError{Op: "dial", Err: syscall.EADDRNOTAVAIL}, PhaseConnect, Exhausted},
		{&net.OpError{Op: "write", Err: syscall.ENOBUFS}, PhaseWrite, Exhausted},
	}
	for _, tt := range tests {
		e := FromIO(tt.err, tt.phase)
		if e.Kind != tt.want {
			t.Errorf("FromIO(%v, %d) = %v, want %v", tt.err, tt.phase, e.Kind, tt.want)
		}
		// Running out of local resources is sluice's own failure, and
		// says nothing of the upstream.
		if (e.Kind == Exhausted) != (e.Source == Internally) {
			t.Errorf("FromIO(%v): %v from %v", tt.err, e.Kind, e.Source)
		}
	}
}

func TestResource(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("socket", syscall.EMFILE)}, "descriptors"},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENFILE)}, "descriptors"},
		{New(Exhausted, Internally, fmt.Errorf("dialing: %w", syscall.ENOBUFS)), "memory"},
		{syscall.ENOMEM, "memory"},
		{&net.OpError{Op: "dial", Err: syscall.EADDRNOTAVAIL}, "ports"},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, ""},
		{io.EOF, ""},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := Resource(tt.err); got != tt.want {
			t.Errorf("Resource(%v) = %q, want %q", tt.err, got, tt.want)
		}
		if LocalExhaustion(tt.err) != (tt.want != "") {
			t.Errorf("LocalExhaustion(%v) = %v", tt.err, !(tt.want != ""))
		}
	}
}

func TestAnswers(t *testing.T) {
	tests := []struct {
		e      *Error
		status int
		ps     string
	}{
		{New(ConnectRefused, Upstream, nil), 502, "connection_refused"},
		{New(ConnectUnreachable, Upstream, nil), 502, "destination_ip_unroutable"},
		{New(ConnectNotFound, Upstream, nil), 502, "destination_not_found"},
		{New(ConnectTimeout, Upstream, nil), 504, "connection_timeout"},
		{New(ResponseTimeout, Upstream, nil), 504, "http_response_timeout"},
		{New(ConnectionClosed, Upstream, nil), 502, "connection_terminated"},
		{New(InvalidResponse, Upstream, nil), 502, "http_protocol_error"},
		{New(NoUpstream, Internally, nil), 503, "destination_unavailable"},
		{New(NoRoute, Internally, nil), 404, "destination_not_found"},
		{&Error{Kind: BadRequest, Source: Downstream, Status: 431}, 431, "http_request_error"},
		{New(Internal, Internally, nil), 500, "proxy_internal_error"},
		{New(Exhausted, Internally, nil), 503, "proxy_internal_error"},
		{New(Drained, Internally, nil), 503, "proxy_internal_error"},
		{New(Denied, Downstream, nil), 403, "http_request_denied"},
		{&Error{Kind: Denied, Source: Downstream, Status: 429}, 429, "http_request_denied"},
		{&Error{Kind: BadRequest, Source: Downstream, Status: 413}, 413, "http_request_error"},
	}
	for _, tt := range tests {
		if tt.e.Answer() != tt.status || tt.e.ProxyStatus() != tt.ps {
			t.Errorf("%v: %d %s, want %d %s", tt.e.Kind, tt.e.Answer(), tt.e.ProxyStatus(), tt.status, tt.ps)
		}
	}
}
