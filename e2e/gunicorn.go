// Package e2e runs sluice end to end: against real upstream programs
// (gunicorn, in this package's tests and in bench/churn) and against the
// misbehaving upstreams of internal/upstreamtest, with a load of clients
// whose every request carries a unique X-Request-Id, and an upstream that
// records every request it processes. Tally then compares what the clients
// were told with what the upstream did: a request answered 2xx that was
// never processed, or processed twice, is a broken promise.
//
// The package has no dependency outside the standard library and sluice;
// the programs it starts are found at run time.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/internal/sock"
)

// App is the WSGI application the gunicorn scenario serves
// (testdata/app.py): it records each request, answers 200 and echoes
// X-Request-Id. See its doc string for the record format.
//
//go:embed testdata/app.py
var App []byte

// DefaultPython is Debian's interpreter, the one python3-gunicorn installs
// into (a python3 earlier on PATH, pyenv's say, may lack it).
const DefaultPython = "/usr/bin/python3"

// HaveGunicorn reports, as an error saying what is missing, whether python
// (DefaultPython when "") can import gunicorn.
func HaveGunicorn(python string) error {
	if python == "" {
		python = DefaultPython
	}
	out, err := exec.Command(python, "-c", "import gunicorn").CombinedOutput()
	if err != nil {
		// The last line of a traceback says what is missing.
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if last := lines[len(lines)-1]; last != "" {
			err = fmt.Errorf("%w: %s", err, last)
		}
		return fmt.Errorf("%s -c 'import gunicorn': %w", python, err)
	}
	return nil
}

// GunicornOptions say how to run gunicorn. Zero fields take the values of
// the scenario in seed 004: gthread, 2 workers of 4 threads, a worker
// recycled after 200 requests, no jitter, 5 s keep-alive.
type GunicornOptions struct {
	// Python runs gunicorn as "python -m gunicorn"; "" means DefaultPython.
	Python string
	// Dir is a directory for app.py and the record file; it must exist.
	Dir string
	// Workers (default 2), Threads (default 4), MaxRequests (default 200;
	// negative means none) and KeepAlive (default 5 s) are gunicorn's
	// --workers, --threads, --max-requests and --keep-alive.
	Workers, Threads, MaxRequests int
	KeepAlive                     time.Duration
	// Delay is how long the app takes per request; 0 means 2 ms.
	Delay time.Duration
	// Log receives gunicorn's error log (boots, recycles, failures); nil
	// discards it.
	Log io.Writer
	// Socket, when set, is the path of a Unix domain socket for gunicorn
	// to bind (--bind unix:PATH) instead of a port on 127.0.0.1. A
	// socket's path may be at most 107 bytes: t.TempDir() can be too long.
	Socket string
}

// Gunicorn is a running gunicorn serving App on 127.0.0.1, or on a Unix
// socket.
type Gunicorn struct {
	// Addr is where it listens, "127.0.0.1:port", or "unix:PATH" (the
	// form sluice's config takes).
	Addr string
	// RecordFile is the file App appends its records to.
	RecordFile string

	cmd    *exec.Cmd
	cancel context.CancelFunc
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's result, valid after exited
	once   sync.Once
}

// StartGunicorn starts gunicorn in its own process group and returns once
// it answers App's readiness probe. It picks a free port by listening on
// 127.0.0.1:0 and closing; should the port be taken again before gunicorn
// binds it, it tries another, three times in all. Stop must be called.
func StartGunicorn(ctx context.Context, o GunicornOptions) (*Gunicorn, error) {
	if o.Dir == "" {
		return nil, errors.New("e2e: GunicornOptions.Dir is required")
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "app.py"), App, 0o644); err != nil {
		return nil, err
	}
	var errs []error
	for range 3 {
		g, err := startGunicorn(ctx, o)
		if err == nil {
			return g, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func startGunicorn(ctx context.Context, o GunicornOptions) (*Gunicorn, error) {
	addr, bind := "unix:"+o.Socket, "unix:"+o.Socket
	if o.Socket == "" {
		var err error
		if addr, err = FreeAddr(); err != nil {
			return nil, err
		}
		bind = addr
	}
	python := o.Python
	if python == "" {
		python = DefaultPython
	}
	workers, threads, maxReq := orInt(o.Workers, 2), orInt(o.Threads, 4), orInt(o.MaxRequests, 200)
	keepAlive := max(1, int(orDuration(o.KeepAlive, 5*time.Second)/time.Second))
	args := []string{"-m", "gunicorn",
		"--chdir", o.Dir,
		"--bind", bind,
		"--worker-class", "gthread",
		"--workers", strconv.Itoa(workers),
		"--threads", strconv.Itoa(threads),
		"--keep-alive", strconv.Itoa(keepAlive),
		"--error-logfile", "-",
		"--log-level", "info",
	}
	if maxReq > 0 {
		args = append(args, "--max-requests", strconv.Itoa(maxReq), "--max-requests-jitter", "0")
	}
	args = append(args, "app:application")

	record := filepath.Join(o.Dir, "records.txt")
	runCtx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(runCtx, python, args...)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(),
		"SLUICE_E2E_RECORD="+record,
		"SLUICE_E2E_DELAY="+strconv.FormatFloat(orDuration(o.Delay, 2*time.Millisecond).Seconds(), 'f', -1, 64),
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
	)
	// Its own process group, so that Stop reaches the workers too; and
	// SIGTERM should this process die without calling Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("starting gunicorn: %w", err)
	}
	g := &Gunicorn{Addr: addr, RecordFile: record, cmd: cmd, cancel: cancel, exited: make(chan struct{})}
	go func() {
		g.err = cmd.Wait()
		close(g.exited)
	}()
	if err := g.waitReady(ctx, 20*time.Second); err != nil {
		g.Stop()
		return nil, err
	}
	return g, nil
}

// waitReady polls App's readiness probe until it answers, gunicorn exits,
// or timeout passes.
func (g *Gunicorn) waitReady(ctx context.Context, timeout time.Duration) error {
	tr := &http.Transport{DisableKeepAlives: true}
	url := "http://" + g.Addr + "/-/ready"
	if _, unix := sock.UnixPath(g.Addr); unix {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return sock.Dial(ctx, &d, g.Addr)
		}
		url = "http://localhost/-/ready"
	}
	client := &http.Client{Timeout: time.Second, Transport: tr}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.HasPrefix(string(body), "sluice-e2e app") {
				return nil
			}
			err = fmt.Errorf("%s answered the readiness probe with %d %q: not our app", g.Addr, resp.StatusCode, body)
		}
		select {
		case <-g.exited:
			return fmt.Errorf("gunicorn on %s exited before it was ready: %v", g.Addr, g.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gunicorn on %s not ready after %s: %v", g.Addr, timeout, err)
		}
	}
}

// Stop stops gunicorn: SIGTERM to its process group (a graceful stop, in
// which workers finish the requests they hold), then, after 10 s or once
// the arbiter is gone, SIGKILL to whatever is left of the group. It may be
// called more than once.
func (g *Gunicorn) Stop() {
	g.once.Do(func() {
		g.cancel()
		<-g.exited
		syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	})
}

// Records reads the record file.
func (g *Gunicorn) Records() ([]Record, error) { return ReadRecords(g.RecordFile) }

// Record is one request App processed.
type Record struct {
	ID      string // the X-Request-Id, "-" when there was none
	Method  string
	PID     int // the worker process that processed it
	BodyLen int // request body bytes the app read
}

// ReadRecords parses a file of App's records. A missing file holds none.
func ReadRecords(path string) ([]Record, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []Record
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 {
			return recs, fmt.Errorf("%s:%d: want 4 fields, have %q", path, n, sc.Text())
		}
		pid, err1 := strconv.Atoi(fields[2])
		blen, err2 := strconv.Atoi(fields[3])
		if err1 != nil || err2 != nil {
			return recs, fmt.Errorf("%s:%d: bad number in %q", path, n, sc.Text())
		}
		recs = append(recs, Record{ID: fields[0], Method: fields[1], PID: pid, BodyLen: blen})
	}
	return recs, sc.Err()
}

// FreeAddr returns "127.0.0.1:port" for a port that was free a moment
// ago: it listens on port 0 and closes.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// LineWriter is an io.Writer that calls Line with each complete line
// written to it (without its newline); it is safe for concurrent use. It
// turns a child process's output into test log lines.
type LineWriter struct {
	Line func(string)
	mu   sync.Mutex
	buf  []byte
}

func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.Line(strings.TrimRight(string(w.buf[:i]), "\r"))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func orDuration(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}
