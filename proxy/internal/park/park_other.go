//go:build !linux

package park

import "time"

// Supported reports whether a Parker can hold connections here.
const Supported = false

// Parker is unavailable here: waiting connections keep their goroutine.
type Parker[C Conn] struct{}

// New returns nil: there is no epoll set here.
func New[C Conn]() *Parker[C] { return nil }

// Park reports false.
func (p *Parker[C]) Park(C, int, time.Time) bool { return false }

// Close returns nothing.
func (p *Parker[C]) Close() []C { return nil }

// Len returns 0.
func (p *Parker[C]) Len() int { return 0 }
