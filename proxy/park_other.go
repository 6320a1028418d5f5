//go:build !linux

package proxy

import "time"

// parker is unavailable here: idle connections keep their goroutine.
type parker struct{}

const parkAfter = 0

func newParker(*Server) *parker              { return nil }
func (p *parker) park(*conn, time.Time) bool { return false }
func (p *parker) closeAll()                  {}
func (p *parker) linger(*conn) bool          { return false }
func (p *parker) answered()                  {}
