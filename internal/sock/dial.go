package sock

import (
	"context"
	"net"
	"strings"
)

// UnixPrefix starts the address of a Unix domain socket: "unix:" and the
// socket's path, as in "unix:/run/gunicorn.sock" (nginx's and gunicorn's
// spelling). Any other address is a TCP host:port.
const UnixPrefix = "unix:"

// MaxUnixPath is the longest path a Unix domain socket can be reached at
// on Linux: sun_path holds 108 bytes, the last for the terminating NUL
// (macOS and the BSDs allow 103).
const MaxUnixPath = 107

// UnixPath returns the socket path of a "unix:PATH" address and true, or
// "" and false for a host:port.
func UnixPath(addr string) (path string, ok bool) {
	if !strings.HasPrefix(addr, UnixPrefix) {
		return "", false
	}
	return addr[len(UnixPrefix):], true
}

// Dial connects to addr with d: to the Unix domain socket at PATH for
// "unix:PATH", over TCP for a host:port. Unix sockets take d's Timeout and
// ctx; its TCP settings (KeepAlive and the like) do not apply to them.
func Dial(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
	if path, ok := UnixPath(addr); ok {
		return d.DialContext(ctx, "unix", path)
	}
	return d.DialContext(ctx, "tcp", addr)
}
