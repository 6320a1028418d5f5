package sock

import "syscall"

// errnoErr returns the common errors as the values syscall keeps, so that
// comparisons with syscall.EAGAIN hold and nothing is allocated.
func errnoErr(e syscall.Errno) error {
	switch e {
	case syscall.EAGAIN:
		return syscall.EAGAIN
	case syscall.EINTR:
		return syscall.EINTR
	}
	return e
}
