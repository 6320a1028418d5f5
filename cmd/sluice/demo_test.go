//go:build unix

package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestDemo runs sluice demo and keeps every promise it prints: each curl
// line it prints is run as printed, and gets what the demo says it gets
// (the GETs 200 though flaky drops connections; a POST 200, never meeting
// a drop; a POST flaky reads and resets 502 with Proxy-Status, not sent
// again; the same POST with an Idempotency-Key 200 from steady; HTTP/2
// 200); the status page it names answers; its access log is unbuffered.
func TestDemo(t *testing.T) {
	curl := need(t, "curl", "the demo's lines are curl commands")
	need(t, "bash", "runs the demo's lines as printed")
	var stdout, stderr proxytest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"demo", "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	defer func() {
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("sluice demo exited %d:\n%s", code, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("sluice demo did not stop 10 s after TERM")
		}
	}()
	wait.For(t, "the demo's text", func() bool { return strings.Contains(stdout.String(), "Ctrl-C stops.") })
	text := stdout.String()
	addr := regexp.MustCompile(`a proxy on http://(127\.0\.0\.1:\d+) `).FindStringSubmatch(text)
	status := regexp.MustCompile(`Status page: (http://127\.0\.0\.1:\d+/status)`).FindStringSubmatch(text)
	if addr == nil || status == nil {
		t.Fatalf("the demo names no proxy address or no status page:\n%s", text)
	}

	// Each command printed, as printed, and what it must give.
	promises := []struct {
		command string
		want    []string // in the output, each
		log     []string // in the log, each
	}{
		{"for i in 1 2 3 4 5 6; do curl -s http://ADDR/n/$i; done", []string{"GET /n/1\n", "GET /n/2\n", "GET /n/3\n", "GET /n/4\n", "GET /n/5\n", "GET /n/6\n"},
			[]string{"closing the connection without answering", "retrying: GET is idempotent (stale pooled connection)"}},
		{"curl -s -X POST -d item=1 http://ADDR/orders", []string{"hello from the", "POST /orders\n"}, nil},
		{"curl -si -X POST -d item=1 http://ADDR/crash/orders", []string{"HTTP/1.1 502 Bad Gateway\r\n",
			"Proxy-Status: sluice; error=connection_terminated; details=\"1 try: connection_reset\"\r\n"},
			[]string{"POST /crash/orders (6 body bytes): read it whole; resetting the connection without answering",
				`decision="not retried: POST without Idempotency-Key, request may have been processed"`}},
		{"curl -si -X POST -H 'Idempotency-Key: order-42' -d item=1 http://ADDR/crash/orders", []string{"HTTP/1.1 200 OK\r\n",
			"hello from the steady upstream"}, []string{`decision="retrying: POST carries Idempotency-Key"`}},
		{"curl -s --http2-prior-knowledge http://ADDR/hello", []string{"hello from the", "GET /hello\n"}, nil},
	}
	printed := 0
	for _, line := range strings.Split(text, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "curl ") || strings.HasPrefix(l, "for ") {
			printed++
		}
	}
	if printed != len(promises) {
		t.Errorf("the demo prints %d commands, the test checks %d:\n%s", printed, len(promises), text)
	}
	for _, p := range promises {
		command := strings.ReplaceAll(p.command, "ADDR", addr[1])
		if !strings.Contains(text, "  "+command+"\n") {
			t.Errorf("the demo does not print %q", command)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		sh := exec.CommandContext(ctx, "bash", "-c", strings.Replace(command, "curl ", curl+" ", -1))
		out, err := sh.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: %v\n%s", command, err, out)
			continue
		}
		for _, w := range p.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: the output lacks %q:\n%s", command, w, out)
			}
		}
		for _, w := range p.log {
			wait.For(t, "the log line "+w, func() bool { return strings.Contains(stderr.String(), w) })
		}
	}
	// The POST flaky reset went to no other server.
	if n := strings.Count(stderr.String(), "upstream steady: conn#"); n == 0 || strings.Contains(stderr.String(), "POST /crash/orders (6 body bytes): 200") {
		t.Errorf("the POST without a key reached steady:\n%s", stderr.String())
	}
	// The POSTs to /orders never met a dropped connection.
	if strings.Contains(stderr.String(), "target=/orders try=") {
		t.Errorf("a POST to /orders failed a try:\n%s", stderr.String())
	}

	resp, err := http.Get(status[1])
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || len(page) == 0 {
		t.Errorf("the status page: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	// Unbuffered: each access log line is written as its request ends
	// (to the process's stderr, as access_log.path "" says).
	cfg, err := config.Parse("demo.yaml", []byte(demoConfig("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:1", "127.0.0.1:2")))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.AccessLog.Enabled || cfg.AccessLog.Buffer != 0 || cfg.Admin.Address == "" {
		t.Errorf("the demo's access log: %+v, admin %q; want it on, unbuffered, and the admin listener", cfg.AccessLog, cfg.Admin.Address)
	}
}
