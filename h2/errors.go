package h2

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/net/http2"
)

// ErrConnClosed is returned by a Stream's methods once its connection has
// ended, whatever ended it: the client, a protocol error, Close, a failed write.
var ErrConnClosed = errors.New("h2: connection closed")

// ErrStreamDone is returned by a Stream's write methods once the response
// has ended (END_STREAM sent), and by WriteHeaders and WriteResponse once the
// final header block has been sent.
var ErrStreamDone = errors.New("h2: response already ended")

// ResetError says that a stream was reset with RST_STREAM: by the peer (the
// client of a Stream, the server of a ClientStream) when Remote is set, by
// this side (Reset, or the engine on a stream error) otherwise. Reason, when
// set, says why this side reset it. A REFUSED_STREAM from the server means
// the request was not processed (RFC 9113 §8.7); see NotProcessed.
type ResetError struct {
	StreamID uint32
	Code     http2.ErrCode
	Remote   bool
	Reason   string

	answered bool // a response header block had arrived: processed, whatever the code
}

func (e *ResetError) Error() string {
	if e.Remote {
		return fmt.Sprintf("h2: stream %d reset by the peer: %v", e.StreamID, e.Code)
	}
	if e.Reason != "" {
		return fmt.Sprintf("h2: stream %d reset: %v: %s", e.StreamID, e.Code, e.Reason)
	}
	return fmt.Sprintf("h2: stream %d reset: %v", e.StreamID, e.Code)
}

// ConnError is what Serve returns when the connection ended on a connection
// error (RFC 9113 §5.4.1) detected on this side: a GOAWAY with Code was sent
// (when the connection could still be written) and the connection closed.
type ConnError struct {
	Code   http2.ErrCode
	Reason string
}

func (e *ConnError) Error() string {
	return fmt.Sprintf("h2: connection error %v: %s", e.Code, e.Reason)
}

// deadlineError is returned by Stream.Read and Stream.Write past their
// deadlines. It unwraps to os.ErrDeadlineExceeded and has Timeout, so that
// both errors.Is and os.IsTimeout recognise it.
type deadlineError struct {
	op string
	id uint32
}

func (e *deadlineError) Error() string {
	return fmt.Sprintf("h2: stream %d %s: %v", e.id, e.op, os.ErrDeadlineExceeded)
}
func (e *deadlineError) Timeout() bool   { return true }
func (e *deadlineError) Temporary() bool { return true }
func (e *deadlineError) Unwrap() error   { return os.ErrDeadlineExceeded }

// connErr is the internal form of a connection error raised while processing
// a frame; streamErr the form of a stream error (RFC 9113 §5.4.2).
type connErr struct {
	code   http2.ErrCode
	reason string
}

func (e connErr) Error() string { return fmt.Sprintf("connection error %v: %s", e.code, e.reason) }

type streamErr struct {
	id     uint32
	code   http2.ErrCode
	reason string // what the stream's ResetError will say
}

func (e streamErr) Error() string {
	return fmt.Sprintf("stream %d error %v: %s", e.id, e.code, e.reason)
}
