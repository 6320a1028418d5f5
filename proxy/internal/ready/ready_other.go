//go:build !unix

package ready

import (
	"errors"
	"io"
	"net"

	"github.com/sluice-proxy/sluice/h1"
)

// ErrWouldBlock is what a reader of what the socket holds now returns when
// it holds nothing.
var ErrWouldBlock = errors.New("would block")

// Socket reads through the net package where the raw socket cannot be
// read: an idle connection, or one waiting for the rest of a head, then
// holds its read buffer while it waits.
type Socket struct {
	r *h1.Reader
}

func (w *Socket) Init(_ net.Conn, r *h1.Reader, _ Inliner, _ bool) { w.r = r }
func (w *Socket) FillIdle() error                                  { return w.r.Fill() }
func (w *Socket) FillHead(max int) error                           { return w.r.FillHead(max) }
func (w *Socket) Reader() io.Reader                                { return neverReader{} }
func (w *Socket) Discard() io.Reader                               { return neverReader{} }
func (w *Socket) FD() int                                          { return -1 }
func (w *Socket) Raw() bool                                        { return false }
func (w *Socket) Drained() bool                                    { return false }
func (w *Socket) Pending() bool                                    { return false }
func (w *Socket) Readable() error                                  { return ErrWouldBlock }
func (w *Socket) WriteNow([]byte) (int, error)                     { return 0, ErrWouldBlock }

// Inliner serves the requests a wait for the next one finds; here, none
// is served inline.
type Inliner interface{ ServeInline() bool }

type neverReader struct{}

func (neverReader) Read([]byte) (int, error) { return 0, ErrWouldBlock }
