//go:build unix

package static

import "syscall"

// openFlag is added to the flags a file is opened with: O_NONBLOCK, so
// that opening a FIFO someone left under the root returns at once (it is
// then refused, not being a regular file) rather than waiting for a writer.
const openFlag = syscall.O_NONBLOCK
