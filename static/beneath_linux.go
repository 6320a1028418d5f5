package static

import (
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// beneath opens files under the root in one openat2(2) call each (Linux
// 5.6 and later), which the kernel keeps beneath the root: RESOLVE_BENEATH
// refuses a "..", an absolute symbolic link and a link leading out
// (EXDEV), RESOLVE_NO_MAGICLINKS the links of /proc. os.Root refuses the
// same by walking the name one openat(2) per element, two system calls
// per directory on the way; beneath is used for names with a directory
// in them, os.Root for the others (where it makes one openat too).
type beneath struct {
	dir *os.File // the root, held open for its descriptor
	fd  int
	off atomic.Bool // openat2 is not there: os.Root from then on
}

func newBeneath(root string) *beneath {
	d, err := os.Open(root)
	if err != nil {
		return nil
	}
	return &beneath{dir: d, fd: int(d.Fd())}
}

func (b *beneath) close() {
	if b != nil {
		b.dir.Close()
	}
}

// open opens name under the root, with openFlag. handled is false when
// openat2 cannot be used: the kernel has none (ENOSYS), a seccomp filter
// refuses it (EPERM), or a rename under the root raced the lookup
// (EAGAIN); the caller then uses os.Root.
func (b *beneath) open(name string) (file *os.File, err error, handled bool) {
	if b == nil || b.off.Load() {
		return nil, nil, false
	}
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | openFlag,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(b.fd, name, &how)
	for err == unix.EINTR {
		fd, err = unix.Openat2(b.fd, name, &how)
	}
	switch err {
	case nil:
		return os.NewFile(uintptr(fd), name), nil, true
	case unix.ENOSYS, unix.EPERM:
		b.off.Store(true)
		return nil, nil, false
	case unix.EAGAIN:
		return nil, nil, false
	}
	return nil, &os.PathError{Op: "openat2", Path: name, Err: err}, true
}
