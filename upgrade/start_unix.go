//go:build unix

package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Start starts the executable at path with args, standard input, output
// and error those of this process, and the environment of this process
// with the sockets named in it; it returns once the new process has said
// it is ready (Inherited.Ready), with that process. When the new process
// exits first, or timeout passes, or ctx ends, Start returns an error (a
// timed-out process is killed) and this process goes on with its sockets
// as they were. The new process is reaped when it exits, and otherwise
// not waited for: once ready it outlives this one, which should exit.
//
// The sockets go over as they are, by descriptor number, through
// syscall.ForkExec rather than os/exec: os/exec takes the descriptors of
// its ExtraFiles through os.File.Fd, which puts a socket in blocking mode,
// and the mode is the socket's, shared with this process's listener,
// whose Accept would then block in the system call, past its deadline.
func Start(ctx context.Context, path string, args []string, sockets []Socket, timeout time.Duration) (*os.Process, error) {
	addrs := make([]string, len(sockets))
	fds := []uintptr{0, 1, 2}
	for i, s := range sockets {
		if strings.Contains(s.Address, ",") {
			return nil, fmt.Errorf("upgrade: listen address %q holds a comma", s.Address)
		}
		addrs[i] = s.Address
		rc, err := s.Conn.SyscallConn()
		if err != nil {
			return nil, fmt.Errorf("upgrade: %s: %w", s.Address, err)
		}
		var fd uintptr
		if err := rc.Control(func(d uintptr) { fd = d }); err != nil {
			return nil, fmt.Errorf("upgrade: %s: %w", s.Address, err)
		}
		fds = append(fds, fd) // valid while the caller keeps the socket open
	}
	var p [2]int
	syscall.ForkLock.RLock() // no fork between the pipe and close-on-exec
	err := syscall.Pipe(p[:])
	if err == nil {
		syscall.CloseOnExec(p[0])
		syscall.CloseOnExec(p[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("upgrade: %w", err)
	}
	syscall.SetNonblock(p[0], true) // pollable: the read below can end
	r := os.NewFile(uintptr(p[0]), "upgrade readiness")
	defer r.Close()
	fds = append(fds, uintptr(p[1]))
	env := append(withoutOurs(os.Environ()),
		envListeners+"="+strings.Join(addrs, ","),
		envReady+"="+strconv.Itoa(len(fds)-1))
	pid, err := syscall.ForkExec(path, append([]string{path}, args...), &syscall.ProcAttr{Env: env, Files: fds})
	syscall.Close(p[1]) // the child holds its copy: its exit closes the pipe
	if err != nil {
		return nil, fmt.Errorf("upgrade: starting %s: %w", path, err)
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil, fmt.Errorf("upgrade: %w", err)
	}
	exited := make(chan error, 1)
	go func() { // reaps a child that fails; waits on one that serves
		st, err := proc.Wait()
		if err == nil && !st.Success() {
			err = errors.New(st.String())
		}
		exited <- err
	}()
	ready := make(chan error, 1)
	go func() {
		var b [1]byte
		n, err := r.Read(b[:])
		switch {
		case n == 1:
			ready <- nil
		case errors.Is(err, io.EOF):
			ready <- ErrNotReady
		default:
			ready <- fmt.Errorf("upgrade: reading the readiness pipe: %w", err)
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	fail := func(why error) (*os.Process, error) {
		proc.Kill()
		werr := <-exited
		return nil, fmt.Errorf("%w (pid %d, %v)", why, pid, werr)
	}
	select {
	case err := <-ready:
		if err != nil {
			return fail(err)
		}
		return proc, nil
	case <-t.C:
		return fail(fmt.Errorf("upgrade: the new process was not ready within %v", timeout))
	case <-ctx.Done():
		return fail(fmt.Errorf("upgrade: %w", ctx.Err()))
	}
}
