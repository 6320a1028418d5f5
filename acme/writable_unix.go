//go:build unix

package acme

import "golang.org/x/sys/unix"

// writable reports whether files can be made in dir by this process (its
// effective user): write and search permission, on a file system mounted
// for writing.
func writable(dir string) error {
	return unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS)
}
