package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRunStartFails runs sluice run with a config whose start fails at
// each step that can, after the listeners or the admin and metrics
// endpoints may already be up: every one ends with exit status 1 and one
// line that says what failed, no panic, and nothing left bound.
func TestRunStartFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	dir := t.TempDir()
	tests := []struct {
		name   string
		config string // %FREE% is an address free when the run starts
		want   string
	}{
		{"listener", `
listen:
  - address: %FREE%
  - address: ` + busy + `
`, "listen " + busy + ": address already in use"},
		{"admin", `
listen:
  - address: %FREE%
admin:
  address: ` + busy + `
`, "admin: listen " + busy + ": address already in use"},
		{"metrics", `
listen:
  - address: %FREE%
metrics:
  address: ` + busy + `
`, "metrics: listen " + busy + ": address already in use"},
		{"pid file", `
listen:
  - address: %FREE%
pid_file: ` + filepath.Join(dir, "missing", "sluice.pid") + `
`, "pid_file: open " + filepath.Join(dir, "missing")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			free := freeAddr(t)
			body := strings.ReplaceAll(tt.config, "%FREE%", free) + `
routes:
  - upstream: app
upstreams:
  app:
    servers:
      - address: 127.0.0.1:9
`
			path := filepath.Join(t.TempDir(), "sluice.yaml")
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := run([]string{"run", "-c", path}, &stdout, &stderr)
			out := stderr.String()
			if code != 1 || !strings.Contains(out, tt.want) || strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, out, tt.want)
			}
			var errorLines int
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "level=ERROR") {
					errorLines++
				}
			}
			if errorLines != 1 {
				t.Errorf("%d error lines, want 1:\n%s", errorLines, out)
			}
			// Everything the run bound before failing is closed.
			ln, err := net.Listen("tcp", free)
			if err != nil {
				t.Fatalf("the listener bound before the failure is still open: %v", err)
			}
			ln.Close()
		})
	}
}

// freeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestListenError(t *testing.T) {
	bindErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", errno)}
	}
	tests := []struct {
		address string
		err     error
		want    string
	}{
		{"127.0.0.1:80", bindErr(syscall.EADDRINUSE), "listen 127.0.0.1:80: address already in use"},
		{"0.0.0.0:81", bindErr(syscall.EACCES), "listen 0.0.0.0:81: permission denied: ports below 1024 need root or CAP_NET_BIND_SERVICE"},
		{"0.0.0.0:8081", bindErr(syscall.EACCES), "listen 0.0.0.0:8081: permission denied"},
		{"10.9.9.9:80", bindErr(syscall.EADDRNOTAVAIL), "listen 10.9.9.9:80: cannot assign requested address: no interface of this host has it"},
		{"nowhere:80", errors.New("lookup nowhere: no such host"), "listen nowhere:80: lookup nowhere: no such host"},
	}
	for _, tt := range tests {
		err := listenError(tt.address, tt.err)
		if err.Error() != tt.want {
			t.Errorf("listenError(%s, %v) = %q, want %q", tt.address, tt.err, err, tt.want)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("listenError(%s, %v) does not wrap its cause", tt.address, tt.err)
		}
	}
}
