//go:build unix

package main

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestQuickstartExample runs the README's Quickstart with
// examples/quickstart/sluice.yaml as written, bar what would collide on a
// shared machine (the three addresses, the app's, the pid file, and the
// local CA's storage, STATE_DIRECTORY as systemd sets it): the app over
// HTTPS with the certificate of the CA sluice logs, the redirect from
// plain HTTP, the status page, and sluice reload through the pid file.
func TestQuickstartExample(t *testing.T) {
	app := upstreamtest.Start(t, upstreamtest.OK("the app"))
	dir := t.TempDir()
	example, err := os.ReadFile("../../examples/quickstart/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr, plainAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	pidFile := filepath.Join(dir, "sluice.pid")
	cfg := string(example)
	for _, r := range []struct{ old, new string }{
		{"127.0.0.1:8443", tlsAddr},
		{"127.0.0.1:8080", plainAddr},
		{"127.0.0.1:9901", adminAddr},
		{"127.0.0.1:8000", app.Addr()},
		{"/tmp/sluice-quickstart.pid", pidFile},
	} {
		if !strings.Contains(cfg, r.old) {
			t.Fatalf("the example no longer holds %s: change this test with it", r.old)
		}
		cfg = strings.ReplaceAll(cfg, r.old, r.new)
	}
	// The access log in a file of the test's, rather than on the test's
	// standard error.
	accessLog := filepath.Join(dir, "access.log")
	cfg += "access_log: {path: " + accessLog + ", buffer: 0}\n"
	cfgPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STATE_DIRECTORY", filepath.Join(dir, "state"))

	// ./sluice run -c examples/quickstart/sluice.yaml &
	addr, log, waitLog, _ := runSluice(t, cfgPath)
	if addr != tlsAddr {
		t.Fatalf("the TLS listener is on %s, want %s", addr, tlsAddr)
	}
	root := waitLog(regexp.MustCompile(`msg="local CA" root=(\S+) created=true`), 1)[0][1]
	if want := filepath.Join(dir, "state", "pki", "root.crt"); root != want {
		t.Errorf("the root is at %s, want %s", root, want)
	}
	rootPEM, err := os.ReadFile(root)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)

	// curl --cacert ~/.local/share/sluice/pki/root.crt https://localhost:8443/
	if body, _, err := getTLS(t, addr, "localhost", roots); err != nil || body != "the app" {
		t.Errorf("https://localhost/: %q, %v; want the app's page", body, err)
	}
	// curl -I http://localhost:8080/
	c, err := net.DialTimeout("tcp", plainAddr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("HEAD / HTTP/1.1\r\nHost: localhost:" + portString(plainAddr) + "\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://localhost:" + portString(tlsAddr) + "/"; resp.StatusCode != 308 || resp.Header.Get("Location") != want {
		t.Errorf("plain HTTP: %d, Location %q; want 308 to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	// http://127.0.0.1:9901/status
	status, err := http.Get("http://" + adminAddr + "/status")
	if err != nil {
		t.Fatal(err)
	}
	status.Body.Close()
	if status.StatusCode != 200 {
		t.Errorf("the status page: %d", status.StatusCode)
	}
	// ./sluice reload -c examples/quickstart/sluice.yaml
	var stdout, stderr bytes.Buffer
	if code := run([]string{"reload", "-c", cfgPath}, &stdout, &stderr); code != 0 {
		t.Fatalf("sluice reload: exit %d\n%s", code, stderr.String())
	}
	waitLog(regexp.MustCompile(`msg=reloaded`), 1)
	if body, _, err := getTLS(t, addr, "localhost", roots); err != nil || body != "the app" {
		t.Errorf("after the reload: %q, %v", body, err)
	}
	// Every request has its line in the access log.
	wait.For(t, "the access log's lines of the GETs and the HEAD", func() bool {
		lines, _ := os.ReadFile(accessLog)
		return len(regexp.MustCompile(`method=GET .*status=200 .*upstream_name=app `).FindAll(lines, -1)) == 2 &&
			regexp.MustCompile(`method=HEAD .*status=308 `).Match(lines)
	})
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", log.String())
	}
}

// portString is the port of a host:port address.
func portString(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
