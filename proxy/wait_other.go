//go:build !unix

package proxy

import (
	"errors"
	"io"
	"net"

	"github.com/sluice-proxy/sluice/h1"
)

var errWouldBlock = errors.New("would block")

// readiness reads through the net package where the raw socket cannot be
// read: an idle connection, or one waiting for the rest of a head, then
// holds its read buffer while it waits.
type readiness struct {
	r       *h1.Reader
	fd      int
	drained bool // unused: nothing is served inline here
}

func (w *readiness) init(_ net.Conn, r *h1.Reader, _ func() bool, _ bool) { w.r, w.fd = r, -1 }
func (w *readiness) fillIdle() error                                      { return w.r.Fill() }
func (w *readiness) fillHead(max int) error                               { return w.r.FillHead(max) }
func (w *readiness) reader() io.Reader                                    { return neverReader{} }
func (w *readiness) discard() io.Reader                                   { return neverReader{} }

type neverReader struct{}

func (neverReader) Read([]byte) (int, error) { return 0, errWouldBlock }
