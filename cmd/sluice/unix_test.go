//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// shortDir returns a new directory under os.TempDir(), removed when the
// test ends: t.TempDir()'s paths can pass the 107 bytes a Unix socket's
// path may have.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ux")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// curlPath returns curl's path, skipping the test when it is missing,
// unless CI=true, where it fails.
func curlPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is required when CI=true (Debian: apt-get install curl)")
		}
		t.Skip("curl is missing (Debian: apt-get install curl)")
	}
	return p
}

// unixClient is an HTTP client that connects to the Unix socket at path
// whatever the URL's host.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 1,
	}}
}

// TestRunUnixSocket serves on a Unix socket as sluice run does: it
// replaces a socket file a crashed process left, gives the file its mode,
// serves curl and Go's client through it (the client is "unix:", trusted
// here, so that its X-Forwarded-For names the client), keeps the socket
// (the same file) across a reload that starts a new server and one that
// only changes the mode, removes the file when a reload drops the
// listener and makes it again when one adds it back, refuses to take a
// live socket from a second sluice, and removes the file at shutdown.
func TestRunUnixSocket(t *testing.T) {
	curl := curlPath(t)
	up := upstreamtest.Start(t, upstreamtest.Echo())
	dir := shortDir(t)
	sockPath := filepath.Join(dir, "sluice.sock")
	accessPath := filepath.Join(dir, "access.log")

	// A socket left by a process that crashed: nothing accepts on it.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sockPath, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()

	conf := func(mode, header string, unix bool) string {
		listen := "listen: [{address: 127.0.0.1:0}]\n"
		if unix {
			listen = fmt.Sprintf("listen: [{address: 127.0.0.1:0}, {address: \"unix:%s\", mode: %s}]\n", sockPath, mode)
		}
		return listen + fmt.Sprintf("timeouts: {header: %s}\n", header) +
			fmt.Sprintf("access_log: {path: %s, buffer: 0, format: '$client $peer $method $target $status'}\n", accessPath) +
			"forwarded: {trusted: [\"unix:\"], client_ip: x_forwarded_for}\n" + fmt.Sprintf(upstreamsOf, up.Addr())
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(conf("0660", "10s", true)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	log := &proxytest.Buffer{}
	r, err := start(path, cfg, loaded{}, log, newLog(log, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			r.stop(false)
		}
		if t.Failed() {
			t.Logf("sluice's log:\n%s", log)
		}
	})
	s := &started{running: r, path: path, log: log}

	info := func() fs.FileInfo {
		t.Helper()
		fi, err := os.Stat(sockPath)
		if err != nil {
			t.Fatalf("the socket file: %v", err)
		}
		if fi.Mode()&fs.ModeSocket == 0 {
			t.Fatalf("%s is %v, not a socket", sockPath, fi.Mode())
		}
		return fi
	}
	if m := info().Mode().Perm(); m != 0o660 {
		t.Errorf("socket mode %v, want 0660", m)
	}
	if !strings.Contains(log.String(), "msg=listening address=unix:"+sockPath) {
		t.Errorf("the log does not name the socket as unix:%s:\n%s", sockPath, log)
	}

	// curl through the socket.
	out, err := exec.Command(curl, "-sS", "--unix-socket", sockPath, "-H", "X-Forwarded-For: 203.0.113.9",
		"-o", "/dev/null", "-w", "%{http_code}", "http://app.example/by-curl").CombinedOutput()
	if err != nil || string(out) != "200" {
		t.Fatalf("curl --unix-socket: %v, %s", err, out)
	}
	reqs := up.Requests()
	if got := reqs[len(reqs)-1].Get("X-Forwarded-For"); got != "203.0.113.9, unix:" {
		t.Errorf("X-Forwarded-For upstream %q, want the trusted Unix peer's extended: 203.0.113.9, unix:", got)
	}
	// Go's client, its connection kept alive.
	client := unixClient(sockPath)
	get := func(target string) {
		t.Helper()
		resp, err := client.Get("http://app.example" + target)
		if err != nil {
			t.Fatalf("GET %s over the Unix socket: %v", target, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", target, resp.StatusCode)
		}
	}
	get("/go")
	get("/go")
	wait.For(t, "the access log lines", func() bool {
		b, _ := os.ReadFile(accessPath)
		return strings.Count(string(b), "\n") == 3
	})
	// (A line is written once its answer went out: curl's may come after
	// the next request's.)
	if b, _ := os.ReadFile(accessPath); !strings.Contains(string(b), "203.0.113.9 unix: GET /by-curl 200\n") ||
		strings.Count(string(b), "unix: unix: GET /go 200\n") != 2 {
		t.Errorf("access log:\n%s", b)
	}

	// A reload that starts a new server (timeouts.header) keeps the
	// socket: the same file, serving.
	before := info()
	s.reloadWith(t, conf("0660", "5s", true))
	if !strings.Contains(log.String(), "new_server=[timeouts]") {
		t.Fatalf("the reload did not start a new server:\n%s", log)
	}
	if !os.SameFile(before, info()) {
		t.Error("the reload made a new socket file")
	}
	get("/after-reload")
	// One that changes the mode only: the file takes it.
	s.reloadWith(t, conf("0600", "5s", true))
	if m := info().Mode().Perm(); m != 0o600 || !os.SameFile(before, info()) {
		t.Errorf("after a reload to mode 0600: mode %v, same file %v", m, os.SameFile(before, info()))
	}
	get("/after-mode")

	// A second sluice does not take the live socket.
	path2 := filepath.Join(dir, "second.yaml")
	if err := os.WriteFile(path2, []byte(conf("0660", "5s", true)), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run([]string{"run", "-c", path2}, &bytes.Buffer{}, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "listen unix:"+sockPath+": address already in use") {
		t.Errorf("a second sluice on the same socket: exit %d:\n%s", code, stderr.String())
	}
	if !os.SameFile(before, info()) {
		t.Fatal("the second sluice replaced the live socket's file")
	}
	get("/after-second")

	// A reload without the listener removes the file; one with it makes
	// it again.
	s.reloadWith(t, conf("0660", "5s", false))
	if _, err := os.Lstat(sockPath); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the listener is gone, its file not: %v", err)
	}
	s.reloadWith(t, conf("0660", "5s", true))
	client.CloseIdleConnections()
	get("/back")
	if m := info().Mode().Perm(); m != 0o660 {
		t.Errorf("socket mode %v, want 0660", m)
	}

	// Shutdown removes the file.
	stopped = true
	r.stop(false)
	if _, err := os.Lstat(sockPath); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the socket file outlives sluice: %v", err)
	}
}
