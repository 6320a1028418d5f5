//go:build linux && !race

package sock

import (
	"syscall"
	"unsafe"
)

// Read reads from a non-blocking socket with one read(2), as syscall.Read
// does, but without telling Go's scheduler that a system call is under
// way: on a non-blocking descriptor the call never waits, and the
// scheduler's bookkeeping is what costs. Told of a system call, its
// monitor thread (sysmon) takes the P of one that lasts two of its ticks
// (20 µs or more, as a loopback write delivering to a process does) and
// wakes a thread to run others; with one P (GOMAXPROCS=1, a pinned proxy)
// there are no others, and the hand-off is two context switches for
// nothing, and keeps the monitor waking every 20 µs. fd must be
// non-blocking.
func Read(fd int, p []byte) (int, error) { return rawIO(syscall.SYS_READ, fd, p) }

// Write writes to a non-blocking socket with one write(2), as Read reads.
func Write(fd int, p []byte) (int, error) { return rawIO(syscall.SYS_WRITE, fd, p) }

// rawIO makes the read(2) or write(2) trap of fd and p without the
// scheduler's bookkeeping, and returns what syscall.Read or Write would.
func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return -1, errnoErr(e)
	}
	return int(n), nil
}
