// Package upgrade replaces a running server process by a new one without
// closing its listening sockets, as nginx does on USR2: the old process
// starts the new one with the sockets as inherited descriptors (Start),
// the new one takes those it still listens on (Inherit, Inherited.Take),
// binds the others, and says it is ready (Inherited.Ready) once it
// accepts. Only then does the old process stop accepting; connections
// that arrive meanwhile wait in the sockets' queues, which both share, so
// that none is refused.
//
// What goes over: each socket as a descriptor from 3 on (exec.Cmd's
// ExtraFiles), the environment variable SLUICE_UPGRADE_LISTENERS naming,
// in order, the listen address each was configured with, and
// SLUICE_UPGRADE_READY naming the descriptor of a pipe the new process
// writes a byte to once ready. The new process unsets both, so that its
// own children do not inherit them.
package upgrade

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The environment variables the old process sets for the new one.
const (
	envListeners = "SLUICE_UPGRADE_LISTENERS"
	envReady     = "SLUICE_UPGRADE_READY"
)

// Socket is a listening socket handed to the new process: the address it
// was configured with (as the config file spells it: 127.0.0.1:0, say),
// which the new process matches against its own config, and the socket
// (a *net.TCPListener, say).
type Socket struct {
	Address string
	Conn    syscall.Conn
}

// ErrNotReady is wrapped by Start's error when the new process exited, or
// closed its end of the pipe, without saying it was ready.
var ErrNotReady = errors.New("upgrade: the new process exited without becoming ready")

// withoutOurs returns env without this package's variables.
func withoutOurs(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, envListeners+"=") || strings.HasPrefix(kv, envReady+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Inherited are the sockets this process was handed by the one it
// replaces, and the pipe it says it is ready on. The zero value (and nil)
// holds none: a process started otherwise.
type Inherited struct {
	sockets []inherited
	ready   *os.File
}

type inherited struct {
	address string
	file    *os.File
	taken   bool
}

// Inherit reads what the process that started this one handed it, and
// unsets the variables that said so. It returns nil, nil when this
// process was not started by Start. Descriptors it names that are not
// open make it fail.
func Inherit() (*Inherited, error) {
	list, ok := os.LookupEnv(envListeners)
	readyFD, rok := os.LookupEnv(envReady)
	if !ok && !rok {
		return nil, nil
	}
	os.Unsetenv(envListeners)
	os.Unsetenv(envReady)
	in := &Inherited{}
	if list != "" {
		for i, addr := range strings.Split(list, ",") {
			fd := 3 + i
			f := os.NewFile(uintptr(fd), "listener "+addr)
			if f == nil {
				in.Close()
				return nil, fmt.Errorf("upgrade: descriptor %d for %s is not valid", fd, addr)
			}
			in.sockets = append(in.sockets, inherited{address: addr, file: f})
		}
	}
	if rok {
		fd, err := strconv.Atoi(readyFD)
		if err != nil || fd < 3 {
			in.Close()
			return nil, fmt.Errorf("upgrade: %s=%q is not a descriptor", envReady, readyFD)
		}
		in.ready = os.NewFile(uintptr(fd), "upgrade readiness")
	}
	return in, nil
}

// Take returns a listener on the inherited socket configured with address
// that no earlier Take returned, the first in the order they were handed
// over; or, failing that, one bound to the address that address resolves
// to when it names a port; and false when there is none. Addresses are
// matched as spelled first, so that two listeners on port 0 each get back
// their own socket.
func (in *Inherited) Take(address string) (net.Listener, bool, error) {
	if in == nil {
		return nil, false, nil
	}
	i := in.find(address)
	if i < 0 {
		return nil, false, nil
	}
	s := &in.sockets[i]
	s.taken = true
	ln, err := net.FileListener(s.file) // a copy of the descriptor
	s.file.Close()
	if err != nil {
		return nil, false, fmt.Errorf("upgrade: inherited socket for %s: %w", s.address, err)
	}
	return ln, true, nil
}

// TakePacket is Take for a UDP socket (an HTTP/3 listener's), matched by
// address as spelled only.
func (in *Inherited) TakePacket(address string) (net.PacketConn, bool, error) {
	if in == nil {
		return nil, false, nil
	}
	for i := range in.sockets {
		s := &in.sockets[i]
		if s.taken || s.address != address {
			continue
		}
		s.taken = true
		pc, err := net.FilePacketConn(s.file) // a copy of the descriptor
		s.file.Close()
		if err != nil {
			return nil, false, fmt.Errorf("upgrade: inherited socket for %s: %w", s.address, err)
		}
		return pc, true, nil
	}
	return nil, false, nil
}

func (in *Inherited) find(address string) int {
	for i, s := range in.sockets {
		if !s.taken && s.address == address {
			return i
		}
	}
	want, err := net.ResolveTCPAddr("tcp", address)
	if err != nil || want.Port == 0 {
		return -1
	}
	for i, s := range in.sockets {
		if s.taken {
			continue
		}
		if ln, err := net.FileListener(s.file); err == nil {
			got, ok := ln.Addr().(*net.TCPAddr)
			ln.Close()
			if ok && got.Port == want.Port && got.IP.Equal(want.IP) {
				return i
			}
		}
	}
	return -1
}

// Close closes the inherited sockets no Take returned (those the new
// config no longer listens on: the old process still drains their
// connections), and the readiness pipe if Ready was not called.
func (in *Inherited) Close() {
	if in == nil {
		return
	}
	for i := range in.sockets {
		if s := &in.sockets[i]; !s.taken {
			s.taken = true
			s.file.Close()
		}
	}
	if in.ready != nil {
		in.ready.Close()
		in.ready = nil
	}
}

// Ready tells the old process that this one serves: it stops accepting
// and drains. Call it once every listener accepts. It does nothing for a
// process not started by Start, and after its first call.
func (in *Inherited) Ready() error {
	if in == nil || in.ready == nil {
		return nil
	}
	_, err := in.ready.Write([]byte{1})
	in.ready.Close()
	in.ready = nil
	return err
}
