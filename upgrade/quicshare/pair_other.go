//go:build !linux

package quicshare

import (
	"errors"
	"net"
	"os"
)

// socketPair fails: sharing needs Linux.
func socketPair() (*net.UnixConn, *os.File, error) {
	return nil, nil, errors.ErrUnsupported
}

// FromFile fails: sharing needs Linux. It closes f.
func FromFile(f *os.File) (*net.UnixConn, error) {
	f.Close()
	return nil, errors.ErrUnsupported
}
