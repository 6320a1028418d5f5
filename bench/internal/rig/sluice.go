package rig

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Binary returns bin when it is not "" (a -sluice flag's value, used as
// given); otherwise it builds ./cmd/sluice into dir as "sluice" and returns
// that path. The build runs in the working directory, which must be the
// module root, as it is for `go run ./bench/...`; the go command's output
// goes to standard error.
func Binary(bin, dir string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	bin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building sluice: %w", err)
	}
	return bin, nil
}

// Sluice is the sluice binary running as a child of this program.
type Sluice struct {
	// Addr is the address its config listens on, "127.0.0.1:port".
	Addr string
	// Pid is its process id, for RSSKB.
	Pid int
	// Log is the file that holds its standard output and error: its error
	// log. It stays after Stop.
	Log string

	cmd  *exec.Cmd
	log  *os.File
	once sync.Once
}

// Start writes config, which must make sluice listen on addr, to
// dir/sluice.yaml (dir is made if need be) and runs `bin run -c
// dir/sluice.yaml` with its output to dir/error.log. It does not wait for
// sluice to listen: see WaitServing. The process gets SIGKILL should this
// program die without stopping it (Pdeathsig). Stop must be called.
func Start(bin, dir, addr, config string) (*Sluice, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "error.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "-c", cfgPath)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	return &Sluice{Addr: addr, Pid: cmd.Process.Pid, Log: log.Name(), cmd: cmd, log: log}, nil
}

// Stop sends sluice SIGTERM, waits for it to exit, 5 s at the most before
// it kills it, and closes its log. It may be called more than once; only
// the first call does anything, so that a process id that may name
// another process by then is never signalled.
func (s *Sluice) Stop() {
	s.once.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
		s.log.Close()
	})
}

// WaitServing calls get, one request to s, every 50 ms until it returns
// nil, for 10 s at the most. After that it returns an error that says
// s.Addr and get's last error; sooner, ctx's error if ctx is done.
func (s *Sluice) WaitServing(ctx context.Context, get func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := get()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sluice does not answer on %s: %v", s.Addr, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WarmUp sends s the 200 requests of a proxy that has been in service, one
// call to get each, stopping at the first error (returned as "warm-up:
// ERR"); then it lets s settle for 2 s and returns its RSS in KiB, the
// base that the memory a load holds is measured from.
func (s *Sluice) WarmUp(get func() error) (rssKB uint64, err error) {
	for range 200 {
		if err := get(); err != nil {
			return 0, fmt.Errorf("warm-up: %w", err)
		}
	}
	time.Sleep(2 * time.Second)
	return RSSKB(s.Pid), nil
}
