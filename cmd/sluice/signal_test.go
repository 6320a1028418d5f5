//go:build unix

package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestRunReopensAccessLogOnUSR1 runs sluice run in this process, rotates
// its access log the way logrotate does (rename, then USR1), and stops it
// with TERM: the lines before the signal are in the renamed file, the
// lines after it in a new file at the path.
func TestRunReopensAccessLogOnUSR1(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	cfgPath := filepath.Join(dir, "sluice.yaml")
	cfg := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\naccess_log: {path: %s, flush: 1h}\n"+
		"routes: [{upstream: app}]\nupstreams:\n  app:\n    servers: [{address: %s}]\n", logPath, up.Addr())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr proxytest.Buffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"run", "-c", cfgPath}, &bytes.Buffer{}, &stderr) }()

	// Serving means the signal handlers are in place (serve sets them up
	// before it starts the listeners).
	listening := regexp.MustCompile(`msg=listening address=(127\.0\.0\.1:\d+)`)
	var addr string
	if !wait.Until(wait.Timeout, func() bool {
		if m := listening.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	}) {
		t.Fatalf("sluice run did not start listening in %v:\n%s", wait.Timeout, stderr.String())
	}
	get := func(path string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) // read whole, the connection is kept
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}
	get("/before")
	// The access log line of a request is written after its response:
	// a second request on the same keep-alive connection is read only
	// once the first one's line is in the log's buffer. It may land in
	// either file.
	get("/sync")
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	if !wait.Until(wait.Timeout, func() bool { return strings.Contains(stderr.String(), "access log reopened") }) {
		t.Fatalf("no reopen %v after USR1:\n%s", wait.Timeout, stderr.String())
	}
	get("/after")
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("sluice run exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sluice run did not stop 10 s after TERM")
	}
	for _, f := range []struct{ file, has, hasNot string }{
		{logPath + ".1", "target=/before", "target=/after"},
		{logPath, "target=/after", "target=/before"},
	} {
		b, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), f.has) || strings.Contains(string(b), f.hasNot) {
			t.Errorf("%s holds %q; want %s and not %s", filepath.Base(f.file), b, f.has, f.hasNot)
		}
	}
}
