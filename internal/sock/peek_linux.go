package sock

import (
	"syscall"
	"unsafe"
)

// Peek looks at the bytes waiting on a socket without taking them and
// without waiting: one recvfrom(2) with MSG_PEEK and MSG_DONTWAIT, unseen
// by the scheduler, as Read is. It returns what syscall.Recvfrom would: the
// count (0 at the peer's end of stream), or an error (syscall.EAGAIN when
// nothing waits). Nothing is read, so the race detector has nothing to
// learn from it, and it is raw under it too.
func Peek(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(ptr), uintptr(len(p)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return -1, errnoErr(e)
	}
	return int(n), nil
}
