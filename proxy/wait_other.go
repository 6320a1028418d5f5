//go:build !unix

package proxy

import (
	"errors"
	"io"
	"net"
)

var errWouldBlock = errors.New("would block")

// readiness is a no-op where the socket cannot be peeked: the read that
// follows waits, holding its buffer.
type readiness struct{}

func (w *readiness) init(net.Conn) {}
func (w *readiness) wait() error   { return nil }

// reader returns a reader that never waits; here it never reads.
func (w *readiness) reader() io.Reader { return neverReader{} }

type neverReader struct{}

func (neverReader) Read([]byte) (int, error) { return 0, errWouldBlock }
