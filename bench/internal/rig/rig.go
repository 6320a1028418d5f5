// Package rig is what the Linux bench tools that measure the sluice binary
// (bench/slowloris, bench/tlsidle) run it in: a temp dir, the binary built
// or given, an upstream that answers "ok", sluice started on a config,
// waited for, warmed up and stopped, its RSS read from /proc, and a normal
// client that times requests beside the load. Everything listens on
// 127.0.0.1. It is Linux only (/proc, Pdeathsig).
package rig

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// TempDir makes a new temp dir whose name starts with prefix. Unless keep,
// remove deletes it and everything in it; with keep, TempDir prints its
// path to standard error ("temp dir: PATH") and remove does nothing.
func TempDir(prefix string, keep bool) (dir string, remove func(), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	if keep {
		fmt.Fprintln(os.Stderr, "temp dir:", dir)
		return dir, func() {}, nil
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// ServeOK serves HTTP on a new listener on 127.0.0.1 for as long as the
// program runs, answering every request 200 with the body "ok\n", and
// returns its address, "127.0.0.1:port".
func ServeOK() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	return ln.Addr().String(), nil
}

// FreePort returns a port that was free on 127.0.0.1 a moment ago. It
// panics if it cannot listen there at all.
func FreePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// SleepUntil returns at t, or sooner when ctx is done; at once if t has
// passed.
func SleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(t)):
	}
}

// Probes is what the normal client of Probe saw.
type Probes struct {
	N, Failed int           // requests sent, and those that failed
	Slowest   time.Duration // the longest a request took, failed or not
}

// Probe starts the normal client beside a load: every 100 ms it calls get,
// one request on a new connection, counting a non-nil error as a failure
// and timing each call. It runs until ctx is done or stop is called; stop
// waits for the call in flight to return and reports what it saw. Stop
// must be called; it may be called more than once.
func Probe(ctx context.Context, get func() error) (stop func() Probes) {
	ctx, cancel := context.WithCancel(ctx)
	var p Probes
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			start := time.Now()
			p.N++
			if get() != nil {
				p.Failed++
			}
			p.Slowest = max(p.Slowest, time.Since(start))
		}
	}()
	return func() Probes {
		cancel()
		<-done
		return p
	}
}
