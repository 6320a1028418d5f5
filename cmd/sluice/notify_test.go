//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestRunNotifiesSystemd runs sluice run in this process with a fake
// NOTIFY_SOCKET, reloads it with sluice reload (which reads the pid file
// and sends SIGHUP), and stops it with TERM: systemd is told READY=1 once
// it serves, RELOADING=1 with MONOTONIC_USEC= then READY=1 around the
// reload, and STOPPING=1 as it drains. sluice reload of a file with
// problems prints them and sends nothing; one without pid_file says so.
func TestRunNotifiesSystemd(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	pidFile := filepath.Join(dir, "run", "sluice.pid")
	if err := os.Mkdir(filepath.Dir(pidFile), 0o755); err != nil {
		t.Fatal(err)
	}
	good := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\npid_file: %s\n", pidFile) +
		fmt.Sprintf(upstreamsOf, up.Addr())
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	notify := fakeNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", notify.addr)
	var stderr proxytest.Buffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"run", "-c", path}, &bytes.Buffer{}, &stderr) }()
	ready := notify.expect(t, "READY=1")
	if pid, err := readPIDFile(pidFile); err != nil || pid != os.Getpid() {
		t.Fatalf("pid file: %d, %v; want %d", pid, err, os.Getpid())
	}
	if !strings.Contains(ready, "STATUS=") {
		t.Errorf("READY=1 without STATUS: %q", ready)
	}

	var out bytes.Buffer
	if code := run([]string{"reload", "-c", path}, &out, &out); code != 0 {
		t.Fatalf("sluice reload: exit %d: %s", code, out.String())
	}
	msg := notify.expect(t, "RELOADING=1")
	m := regexp.MustCompile(`(?m)^MONOTONIC_USEC=(\d+)$`).FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("RELOADING=1 without MONOTONIC_USEC: %q", msg)
	}
	if usec, _ := strconv.ParseInt(m[1], 10, 64); usec <= 0 {
		t.Errorf("MONOTONIC_USEC=%s", m[1])
	}
	if !wait.Until(wait.Timeout, func() bool { return strings.Contains(stderr.String(), "msg=reloaded") }) {
		t.Fatalf("no reload %v after sluice reload:\n%s", wait.Timeout, stderr.String())
	}
	// READY=1 again after RELOADING=1.
	var msgs []string
	if !wait.Until(wait.Timeout, func() bool {
		msgs = notify.messages()
		reloadAt := -1
		for j, m := range msgs {
			if strings.Contains(m, "RELOADING=1") {
				reloadAt = j
			}
		}
		return reloadAt >= 0 && reloadAt+1 < len(msgs) && strings.Contains(msgs[reloadAt+1], "READY=1")
	}) {
		t.Fatalf("no READY=1 after RELOADING=1: %q", msgs)
	}

	// A file with problems: printed, nothing sent.
	before := len(notify.messages())
	if err := os.WriteFile(path, []byte(good+"bogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"reload", "-c", path}, &out, &out); code != 1 ||
		!strings.Contains(out.String(), "bogus") || !strings.Contains(out.String(), "nothing sent") {
		t.Errorf("sluice reload of a bad file: exit %d: %s", code, out.String())
	}
	noPID := filepath.Join(dir, "nopid.yaml")
	os.WriteFile(noPID, []byte(strings.Replace(good, "pid_file: "+pidFile+"\n", "", 1)), 0o644)
	out.Reset()
	if code := run([]string{"reload", "-c", noPID}, &out, &out); code != 1 || !strings.Contains(out.String(), "has no pid_file") {
		t.Errorf("sluice reload without pid_file: exit %d: %s", code, out.String())
	}

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	notify.expect(t, "STOPPING=1")
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("sluice run exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sluice run did not stop 10 s after TERM")
	}
	for _, m := range notify.messages()[before:] {
		if strings.Contains(m, "RELOADING=1") {
			t.Errorf("a reload was signalled for a bad file: %q", m)
		}
	}
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Errorf("pid file left behind: %v", err)
	}
}
