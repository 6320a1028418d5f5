package h2

import (
	"errors"
	"fmt"

	"golang.org/x/net/http2"
)

// ErrGoingAway is returned by OpenStream once the connection is going away:
// the server sent GOAWAY, or Shutdown was called. Nothing was sent; open
// another connection.
var ErrGoingAway = errors.New("h2: connection going away")

// ErrNoCapacity is returned by OpenStream while as many streams are open as
// the server's SETTINGS_MAX_CONCURRENT_STREAMS allows (100 until its
// SETTINGS says otherwise, RFC 9113 §6.5.2). Nothing was sent; open another
// connection or wait for a stream to end.
var ErrNoCapacity = errors.New("h2: no stream available on the connection")

// ErrInvalidRequest is returned, with the reason, by OpenStream and
// WriteTrailers for fields that cannot be sent as they are: malformed
// (RFC 9113 §8.2, §8.3), or a header list over the server's
// SETTINGS_MAX_HEADER_LIST_SIZE. Nothing was sent. It fails the same way on
// any connection: the request is at fault, not the server.
var ErrInvalidRequest = errors.New("h2: invalid request")

// GoAwayError says that the server sent GOAWAY (RFC 9113 §6.8) with
// LastStreamID, Code and Debug.
//
// As a stream's error, StreamID is the stream's id. When it is above
// LastStreamID the server will never process the stream: the request was
// not processed, and may be sent again on another connection whatever its
// method. Otherwise the server may have processed it, and the connection
// ended before the response did; the error then also matches ErrConnClosed.
//
// As ClientConn.Err's answer, StreamID is 0.
type GoAwayError struct {
	StreamID     uint32
	LastStreamID uint32
	Code         http2.ErrCode
	Debug        string

	answered bool // a response header block had arrived: processed, whatever the ids
}

func (e *GoAwayError) Error() string {
	what := "connection going away"
	switch {
	case e.StreamID == 0:
	case e.StreamID > e.LastStreamID:
		what = fmt.Sprintf("stream %d not processed", e.StreamID)
	default:
		what = fmt.Sprintf("stream %d cut short, connection closed", e.StreamID)
	}
	s := fmt.Sprintf("h2: GOAWAY %v last stream %d: %s", e.Code, e.LastStreamID, what)
	if e.Debug != "" {
		s += fmt.Sprintf(" (%q)", e.Debug)
	}
	return s
}

// Graceful reports whether the GOAWAY carried NO_ERROR: the server is
// shutting down (a deploy, a connection age limit), not failing.
func (e *GoAwayError) Graceful() bool { return e.Code == http2.ErrCodeNo }

// Unwrap makes a stream at or below LastStreamID, cut short by the
// connection's end, match ErrConnClosed.
func (e *GoAwayError) Unwrap() error {
	if e.StreamID != 0 && e.StreamID <= e.LastStreamID {
		return ErrConnClosed
	}
	return nil
}

// notSentError is every error OpenStream returns: nothing of the request
// left, whatever err says.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// closedError is a stream's error when the connection ended under it: it
// matches ErrConnClosed and its cause (a *ConnError, io.EOF, a net error).
type closedError struct{ cause error }

func (e *closedError) Error() string   { return "h2: connection closed: " + e.cause.Error() }
func (e *closedError) Unwrap() []error { return []error{ErrConnClosed, e.cause} }

// NotProcessed reports whether err proves that the server did not process
// the request (RFC 9113 §8.7), so that it may be sent again, on another
// connection, whatever its method. It is true exactly for:
//   - an error from OpenStream (nothing was sent; ErrGoingAway, ErrNoCapacity,
//     ErrInvalidRequest, ErrConnClosed);
//   - a *ResetError from the server (Remote) with REFUSED_STREAM;
//   - a *GoAwayError whose StreamID is above its LastStreamID;
//
// except, for the last two, when the server had already sent a response
// header block on the stream: it did process it, whatever it says after
// (RFC 9113 §8.7 forbids both signals then; a server that breaks the rule
// is not believed).
//
// Everything else — another reset code, the connection lost after the
// request's first frame went out, a GOAWAY that covered the stream followed
// by the connection's end, a timeout — may have been processed: only an
// idempotent request may be retried after it.
func NotProcessed(err error) bool {
	var ns *notSentError
	if errors.As(err, &ns) || errors.Is(err, ErrGoingAway) || errors.Is(err, ErrNoCapacity) {
		return true
	}
	var re *ResetError
	if errors.As(err, &re) {
		return re.Remote && re.Code == http2.ErrCodeRefusedStream && !re.answered
	}
	var ge *GoAwayError
	if errors.As(err, &ge) {
		return ge.StreamID > ge.LastStreamID && !ge.answered
	}
	return false // conservatively
}
