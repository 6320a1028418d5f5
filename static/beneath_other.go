//go:build !linux

package static

import "os"

// beneath is openat2(2) on Linux (beneath_linux.go); elsewhere every file
// is opened through os.Root.
type beneath struct{}

func newBeneath(string) *beneath { return nil }

func (b *beneath) close() {}

func (b *beneath) open(string) (*os.File, error, bool) { return nil, nil, false }
