package retry

import (
	"fmt"
	"time"

	"github.com/sluice-proxy/sluice/fault"
)

// Facts are what the engine knows about a failed try at the moment it failed.
type Facts struct {
	Method string
	// Keyed is set when the request carries the policy's idempotency header.
	Keyed bool
	// Err is the failure; its Kind and Status select the condition.
	Err *fault.Error
	// Reused is set when the try ran on a pooled connection.
	Reused bool
	// Wrote is set when any request byte was written to the connection.
	Wrote bool
	// SentDownstream is set when any byte of the final response went to
	// the client; nothing can be retried after that.
	SentDownstream bool
	// Replayable is set when every request body byte consumed so far is
	// still held for a resend (always true for a request without a body).
	Replayable bool
	// Try is this try's number, from 1.
	Try int
	// Elapsed is the time since the first try started.
	Elapsed time.Duration
}

// Decide reports whether another try may follow a failed one, and why, in
// words for the log. It does not consult the retry budget: a caller that gets
// true must still Withdraw from the policy's Budget before it retries.
//
// The order of the checks is the order of the reasons a reader wants: first
// whether a retry is possible at all, then whether the failure is one to
// retry, then whether resending is safe, then the limits.
func Decide(p *Policy, f Facts) (bool, string) {
	if f.SentDownstream {
		return false, "not retried: the response had started going to the client"
	}
	cond := condition(f.Err)
	if cond == 0 || p.Conditions()&cond == 0 {
		return false, fmt.Sprintf("not retried: %s is not in retry.on (%s)", condName(f.Err), p.Conditions())
	}
	if f.Wrote && !f.Replayable {
		return false, "not retried: the request body was larger than body_buffer and had partly gone out"
	}
	if f.Wrote && !Idempotent(f.Method) {
		switch p.Mode() {
		case Never:
			return false, fmt.Sprintf("not retried: %s may have been processed and non_idempotent is never", f.Method)
		case Keyed:
			if !f.Keyed {
				return false, fmt.Sprintf("not retried: %s without %s, request may have been processed", f.Method, p.Header())
			}
		}
	}
	if f.Try >= p.MaxTries() {
		return false, fmt.Sprintf("not retried: tries exhausted (%d of %d)", f.Try, p.MaxTries())
	}
	if p != nil && p.Timeout > 0 && f.Elapsed >= p.Timeout {
		return false, fmt.Sprintf("not retried: retry timeout %s passed", p.Timeout)
	}
	switch {
	case !f.Wrote:
		return true, "retrying: nothing of the request reached the upstream"
	case !Idempotent(f.Method) && f.Keyed:
		return true, fmt.Sprintf("retrying: %s carries %s", f.Method, p.Header())
	case !Idempotent(f.Method):
		return true, fmt.Sprintf("retrying: %s, non_idempotent is always", f.Method)
	case f.Reused && f.Err.Kind != fault.UpstreamStatus:
		return true, fmt.Sprintf("retrying: %s is idempotent (reused connection)", f.Method)
	}
	return true, fmt.Sprintf("retrying: %s is idempotent", f.Method)
}

// condition maps a failure to the retry condition that covers it; 0 means
// none does. A failure while reading the body never gets here unsent only if
// the body had not started downstream, which the engine prevents.
func condition(e *fault.Error) Condition {
	if e == nil || e.Source != fault.Upstream {
		return 0
	}
	switch e.Kind {
	case fault.ConnectRefused, fault.ConnectUnreachable, fault.DNS,
		fault.ConnectionClosed, fault.ConnectionReset, fault.WriteError:
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
