package sock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// DefaultUnixMode is the mode of a Unix socket ListenUnix makes when none
// is asked for: any local user may connect, as to a port on 127.0.0.1
// (nginx makes its sockets so). A tighter mode, or the directory's
// permissions, restrict who may.
const DefaultUnixMode fs.FileMode = 0o666

// ErrNotSocket is ListenUnix's error when the path holds a file that is
// not a socket: it is left alone.
var ErrNotSocket = errors.New("a file that is not a socket is there")

// ListenUnix listens on a Unix domain socket at path with mode (0:
// DefaultUnixMode). A socket file left there by a process that is gone
// (one nothing accepts on: connecting to it is refused) is removed first,
// as a server restarting after a crash needs; one a live server listens
// on is not, and the error wraps syscall.EADDRINUSE. The listener removes
// the file when closed (net.UnixListener.SetUnlinkOnClose), as a process
// that owns the socket should: one that hands it to another process
// turns that off first.
func ListenUnix(path string, mode fs.FileMode) (*net.UnixListener, error) {
	if mode == 0 {
		mode = DefaultUnixMode
	}
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil && errors.Is(err, syscall.EADDRINUSE) {
		if stale, why := staleSocket(path); stale {
			if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				return nil, fmt.Errorf("removing the stale socket: %w", rerr)
			}
			ln, err = net.ListenUnix("unix", addr)
		} else if why != nil {
			return nil, why
		}
	}
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode.Perm()); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// staleSocket reports whether the file at path is a socket nothing
// accepts on; when the file is not a socket it says so.
func staleSocket(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return false, nil
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return false, fmt.Errorf("%s: %w", path, ErrNotSocket)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return false, nil // a live server's
	}
	return errors.Is(err, syscall.ECONNREFUSED), nil
}
