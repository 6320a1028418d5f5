package retry

import (
	"fmt"
	"time"

	"github.com/sluice-proxy/sluice/fault"
)

// Facts are what the engine knows about a failed try at the moment it
// failed, every one read off the wire. Hooks receive a copy: what they do
// with it cannot change what Enforce sees.
type Facts struct {
	Method string
	// Keyed is set when the request carries the policy's idempotency header.
	Keyed bool
	// Err is the failure; its Kind and Status select the condition.
	Err *fault.Error
	// Source is whose failure it was, copied from Err before hooks run:
	// Downstream when the client went away, stalled or sent a broken body
	// (the request cannot be sent whole), Internally when sluice itself ran
	// out of descriptors or ports (another try fails the same way).
	Source fault.Source
	// Reused is set when the try ran on a pooled connection.
	Reused bool
	// Wrote counts the request bytes, head and body, written on this try's
	// connection. 0 means nothing of the request can have reached the
	// upstream.
	Wrote int64
	// Read counts the response bytes read on this try.
	Read int64
	// SentDownstream is set when a byte of the final response went to the
	// client; nothing can be retried after that, only aborted.
	SentDownstream bool
	// Replayable is set when every request body byte consumed so far is
	// still held for a resend (always true for a request without a body).
	Replayable bool
	// Try is this try's number, from 1.
	Try int
	// Elapsed is the time since the first try started.
	Elapsed time.Duration
	// Once is set for a request that must reach the upstream at most once
	// whatever its method and key: a layer in front of an upstream that
	// does not deduplicate keeps its answer by its key (an Idempotency-Key
	// layer), and a resend would process it twice.
	Once bool
}

// Stale reports whether the try failed the way a pooled connection fails
// when its upstream had already closed it unseen (Stale).
func (f *Facts) Stale() bool { return Stale(f.Reused, f.Read, f.Err) }

// Stale reports whether a try on a connection failed the way a pooled
// connection fails when its upstream had already closed it unseen: it was
// reused, and it was closed, reset or refused the write before any
// response byte. That is the keep-alive race, not the server's failure: the
// pool learns from it, the next try dials (Reuse), and passive health does
// not count it.
func Stale(reused bool, read int64, e *fault.Error) bool {
	if !reused || read != 0 || e == nil || e.Source != fault.Upstream {
		return false
	}
	switch e.Kind {
	case fault.ConnectionClosed, fault.ConnectionReset, fault.WriteError:
		return true
	}
	return false
}

// Excludes reports whether a failed try rules its server out for the rest
// of the request. It does when the try timed out after the request, or
// part of it, was sent: the server may still be working on it, and the
// same server never gets the same request twice because it was slow; the
// request goes to another server or the timeout is the answer. A connect
// timeout sent nothing and excludes nothing. It does too when the server's
// certificate did not verify (fault.TLSCertificate) or the server refused
// the TLS handshake (fault.TLSAlert): nothing was sent, but another try on
// that server would meet the same verdict, so the request goes to another
// server as after any connect failure, or the failure is the answer.
func Excludes(wrote int64, e *fault.Error) bool {
	if e == nil || e.Source != fault.Upstream {
		return false
	}
	switch e.Kind {
	case fault.ResponseTimeout, fault.WriteTimeout, fault.ReadTimeout:
		return wrote > 0
	case fault.TLSCertificate, fault.TLSAlert:
		return true
	}
	return false
}

// Unsent reports whether nothing of the request can have reached the
// upstream's HTTP server: nothing of it was written, or the server's TLS
// layer refused the connection before passing anything on. The second is
// TLS 1.3's: the server judges the client's certificate after the client
// has finished its handshake and may have written the request, and refuses
// with an alert (fault.TLSAlert) that the client reads first, on a new
// connection, before any response byte. A server sends such an alert only
// to refuse a handshake, and never hands the application data behind a
// refused handshake to its application. An HTTP/2 upstream says so
// itself (fault.Refused: REFUSED_STREAM, or a GOAWAY that left the stream
// out).
func (f *Facts) Unsent() bool {
	if f.Wrote == 0 {
		return true
	}
	e := f.Err
	if e != nil && e.Source == fault.Upstream && e.Kind == fault.Refused {
		return true // HTTP/2's own word that nothing was processed
	}
	return e != nil && e.Source == fault.Upstream && e.Kind == fault.TLSAlert && !f.Reused && f.Read == 0
}

// Allow is the policy stage of the decision after a failed try: is the
// failure one the policy retries (On), and is resending safe for this
// request (its method, NonIdempotent, the idempotency header)? It says why,
// in words for the log. Hooks may change its answer either way; Enforce
// then applies the hard limits, which they cannot lift.
func (p *Policy) Allow(f *Facts) (bool, string) {
	if f.Source == fault.Internally {
		// Out of descriptors or ports: another server would fare no
		// better, and retry.on has no name for it to be missing from.
		return false, fmt.Sprintf("not retried: sluice itself failed (%s), not the upstream", condName(f.Err))
	}
	cond := condition(f.Err)
	if cond == 0 || p.Conditions()&cond == 0 {
		return false, fmt.Sprintf("not retried: %s is not in retry.on (%s)", condName(f.Err), p.Conditions())
	}
	wrote := !f.Unsent()
	if wrote && !Idempotent(f.Method) {
		switch p.Mode() {
		case Never:
			return false, fmt.Sprintf("not retried: %s may have been processed and non_idempotent is never", f.Method)
		case Keyed:
			if !f.Keyed {
				return false, fmt.Sprintf("not retried: %s without %s, request may have been processed", f.Method, p.Header())
			}
		}
	}
	switch {
	case f.Wrote == 0:
		return true, "retrying: nothing of the request reached the upstream"
	case !wrote:
		return true, "retrying: the upstream refused the TLS handshake; the request it was sent with never reached the server"
	case !Idempotent(f.Method) && f.Keyed:
		return true, fmt.Sprintf("retrying: %s carries %s", f.Method, p.Header())
	case !Idempotent(f.Method):
		return true, fmt.Sprintf("retrying: %s, non_idempotent is always", f.Method)
	case f.Stale():
		return true, fmt.Sprintf("retrying: %s is idempotent (stale pooled connection)", f.Method)
	}
	return true, fmt.Sprintf("retrying: %s is idempotent", f.Method)
}

// Limit names the hard limit that stopped a retry.
type Limit uint8

const (
	NoLimit         Limit = iota
	LimitDownstream       // a byte of the response went to the client
	LimitClient           // the client side failed
	LimitLocal            // sluice itself failed: out of a local resource, or shutting down
	LimitBody             // the request body is no longer held whole
	LimitTries            // every try was used
	LimitTime             // the retry timeout passed
	LimitBudget           // the retry budget was empty
	LimitOnce             // the request must reach the upstream at most once, and may have
)

var limitNames = [...]string{
	NoLimit:         "none",
	LimitDownstream: "downstream",
	LimitClient:     "client",
	LimitLocal:      "local",
	LimitBody:       "body",
	LimitTries:      "tries",
	LimitTime:       "time",
	LimitBudget:     "budget",
	LimitOnce:       "once",
}

func (l Limit) String() string {
	if int(l) < len(limitNames) {
		return limitNames[l]
	}
	return fmt.Sprintf("Limit(%d)", l)
}

// ResponseStarted is why a try that failed after a byte of its response
// went to the client is not retried (LimitDownstream): the client
// connection is aborted instead.
const ResponseStarted = "not retried: the response had started going to the client"

// Enforce is the second stage of the decision: it applies the hard limits
// to the answer the policy (Allow) and the hooks reached, and it is the last
// word. Nothing lifts these limits: a byte of the response went to the
// client; the client side failed; sluice itself failed (out of descriptors
// or ports: no server would fare better); the request body is no longer held whole
// (a resend would send a head promising bytes sluice no longer has); every
// try was used; the retry timeout passed; the retry budget is empty. A
// retry that passes them is withdrawn from the budget, so Enforce is called
// once per failed try. It returns the final answer, why, and the limit that
// refused (NoLimit when none did).
func (p *Policy) Enforce(f *Facts, retry bool, why string) (bool, string, Limit) {
	if !retry {
		return false, why, NoLimit
	}
	switch {
	case f.SentDownstream:
		return false, ResponseStarted, LimitDownstream
	case f.Source == fault.Downstream:
		return false, "not retried: the client side failed", LimitClient
	case f.Source == fault.Internally:
		return false, fmt.Sprintf("not retried: sluice itself failed (%s), not the upstream", f.Err.Kind), LimitLocal
	case f.Once && !f.Unsent():
		return false, "not retried: the request must reach the upstream at most once, and may have", LimitOnce
	case !f.Replayable:
		return false, "not retried: the request body was larger than body_buffer and had partly gone out", LimitBody
	case f.Try >= p.MaxTries():
		return false, fmt.Sprintf("not retried: tries exhausted (%d of %d)", f.Try, p.MaxTries()), LimitTries
	}
	if t := p.RetryTimeout(); t > 0 && f.Elapsed >= t {
		return false, fmt.Sprintf("not retried: retry timeout %s passed", t), LimitTime
	}
	if !p.budget().Withdraw() {
		return false, "not retried: retry budget exhausted", LimitBudget
	}
	return true, why, NoLimit
}

// condition maps a failure to the retry condition that covers it; 0 means
// none does. A failure while reading the body never gets here unsent only if
// the body had not started downstream, which the engine prevents.
func condition(e *fault.Error) Condition {
	if e == nil || e.Source != fault.Upstream {
		return 0
	}
	switch e.Kind {
	case fault.ConnectRefused, fault.ConnectUnreachable, fault.ConnectNotFound, fault.DNS,
		fault.TLSHandshake, fault.TLSAlert, fault.TLSCertificate,
		fault.ConnectionClosed, fault.ConnectionReset, fault.WriteError, fault.Refused:
		return OnError
	case fault.ConnectTimeout, fault.ResponseTimeout, fault.WriteTimeout:
		return OnTimeout
	case fault.InvalidResponse, fault.ResponseTooLarge:
		return OnInvalidHeader
	case fault.UpstreamStatus:
		return Status(e.Status)
	}
	return 0
}

func condName(e *fault.Error) string {
	if e == nil {
		return "no error"
	}
	switch c := condition(e); c {
	case 0:
		return e.Kind.String()
	default:
		return c.String()
	}
}

// Blame says whose failure a failed try was when the engine knows more
// than the error does. A try whose wait was cut because the client gave
// the exchange up (an HTTP/2 client reset its stream) failed for the
// client: fault.ClientClosed, Downstream, which Enforce never retries and
// which gets no answer. One cut because the drain timeout passed failed
// for sluice: fault.Drained, Internally, answered 503 and not retried.
// Failures that are not the upstream's keep their own account; so does
// any failure when neither happened. peer names the server, for the
// error's context.
func Blame(e *fault.Error, clientGone, drained bool, peer string) *fault.Error {
	if e == nil || e.Source != fault.Upstream {
		return e
	}
	switch {
	case clientGone:
		return &fault.Error{Kind: fault.ClientClosed, Source: fault.Downstream,
			Context: "the client reset the stream while " + peer + " was answering", Cause: e}
	case drained:
		return &fault.Error{Kind: fault.Drained, Source: fault.Internally,
			Context: "the drain timeout passed before " + peer + " answered", Cause: e}
	}
	return e
}

// Between are the facts that can stop a request between a decision to
// retry it and the next try: they arise after the decision (the wait of a
// backoff, a handler's choice), so Enforce cannot have seen them.
type Between struct {
	// Drained is set when the drain timeout of a shutdown passed.
	Drained bool
	// CallExpired is set when the call's own deadline (gRPC's
	// grpc-timeout) passed.
	CallExpired bool
	// Excluded is set when the server chosen for the next try must not
	// get this request again (Excludes), and Peer names it.
	Excluded bool
	Peer     string
}

// Again reports whether the next try may go, and if not why, in words for
// the log; the last try's failure is then the answer. No hook lifts it.
func Again(b Between) (bool, string) {
	switch {
	case b.Drained:
		return false, "not retried: the drain timeout passed"
	case b.CallExpired:
		return false, "not retried: the call's grpc-timeout passed"
	case b.Excluded:
		return false, "not retried: the handler chose " + b.Peer + ", which this request must not go to again"
	}
	return true, ""
}
