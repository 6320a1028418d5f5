package h1

import "errors"

// Error is a violation of HTTP/1.1 syntax or framing found in a message.
// Status is the answer a server owes the sender of such a request (400, 414,
// 431, 501, 505); for a response it is 502, the answer a proxy owes its client
// for an invalid upstream response.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func errorf(status int, msg string) *Error { return &Error{Status: status, Msg: msg} }

// Errors the reader and parsers return, comparable with errors.Is.
var (
	ErrHeadTooLarge   = errorf(431, "message head larger than the limit")
	ErrTooManyHeaders = errorf(431, "more header fields than the limit")
	ErrURITooLong     = errorf(414, "request line longer than the head limit")
	ErrBadChunk       = errorf(400, "malformed chunked encoding")
	ErrChunkLine      = errorf(400, "chunk size line too long")
	ErrTrailerLarge   = errorf(431, "trailer section larger than the limit")
	// ErrBodyTooLarge reports a body whose content is over the limit set
	// with Body.Limit (413 Content Too Large, RFC 9110 §15.5.14).
	ErrBodyTooLarge = errorf(413, "body larger than the limit")
	// ErrTruncated reports a message that ended, by the connection closing,
	// before its framing said it would.
	ErrTruncated = errors.New("message truncated: connection closed before the end of the body")
)

// StatusOf returns the status a server should answer for err, or 0 when err
// is not a syntax or framing error.
func StatusOf(err error) int {
	if err == nil {
		return 0
	}
	if e, ok := err.(*Error); ok {
		return e.Status
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}
