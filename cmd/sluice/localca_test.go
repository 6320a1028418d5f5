//go:build unix

package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
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

// runSluice runs sluice run -c path in this process until the test ends
// (SIGTERM), its error log in the returned buffer, and returns when its
// listener serves: the address it logs, and a wait for a log line.
func runSluice(t *testing.T, path string) (addr string, log *proxytest.Buffer, waitLog func(*regexp.Regexp, int) [][]string, stop func()) {
	t.Helper()
	log = &proxytest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run([]string{"run", "-c", path}, &bytes.Buffer{}, log) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("sluice run exited %d:\n%s", code, log.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("sluice run did not stop 10 s after TERM")
		}
	}
	t.Cleanup(stop)
	waitLog = func(re *regexp.Regexp, n int) [][]string {
		t.Helper()
		var m [][]string
		wait.For(t, fmt.Sprintf("%d lines matching %s", n, re), func() bool {
			m = re.FindAllStringSubmatch(log.String(), -1)
			return len(m) >= n
		})
		return m
	}
	addr = waitLog(regexp.MustCompile(`msg=listening address=(127\.0\.0\.1:\d+) tls=true`), 1)[0][1]
	return addr, log, waitLog, stop
}

// getTLS asks addr for / over TLS for name (an IP address is sent no
// SNI), verifying the certificate against roots; it returns the body and
// the certificate, or the handshake's error.
func getTLS(t *testing.T, addr, name string, roots *x509.CertPool) (string, *x509.Certificate, error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots})
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+name+"\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	return string(body), c.ConnectionState().PeerCertificates[0], nil
}

// TestRunInternalTLS runs sluice run with tls: {internal: ...}: it logs
// where the root certificate is and how to trust it; a client that trusts
// that file verifies the certificates for localhost, 127.0.0.1 and a
// route's host; a reload keeps the CA and issues for the names it adds,
// up to max_certificates; a second start makes no new CA and serves the
// certificates stored.
func TestRunInternalTLS(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	storage := filepath.Join(dir, "pki")
	cfgPath := filepath.Join(dir, "sluice.yaml")
	write := func(internal string) {
		cfg := fmt.Sprintf(`listen:
  - address: 127.0.0.1:0
    tls:
      internal: %s
access_log: {enabled: false}
routes:
  - {host: app.test, upstream: app}
  - {upstream: app}
upstreams:
  app:
    servers: [{address: %s}]
`, internal, up.Addr())
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("{storage: " + storage + "}")
	addr, log, waitLog, stop := runSluice(t, cfgPath)
	rootFile := filepath.Join(storage, "root.crt")
	line := waitLog(regexp.MustCompile(`msg="local CA" root=(\S+) created=true .*trust="curl --cacert (\S+);`), 1)[0]
	if line[1] != rootFile || line[2] != rootFile {
		t.Errorf("the start names the root %s (trust: %s), want %s", line[1], line[2], rootFile)
	}
	rootPEM, err := os.ReadFile(rootFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	serials := map[string]string{}
	for _, name := range []string{"localhost", "127.0.0.1", "app.test"} {
		body, cert, err := getTLS(t, addr, name, roots)
		if err != nil || body != "ok" {
			t.Fatalf("%s: %v %q", name, err, body)
		}
		serials[name] = cert.SerialNumber.String()
	}
	var hostErr x509.HostnameError
	if _, _, err := getTLS(t, addr, "other.test", roots); !errors.As(err, &hostErr) {
		t.Errorf("other.test, not a route's host: %v, want the default certificate refused for the name", err)
	}

	// A reload that lists names, and issues for any up to four
	// certificates: the same root, the certificates issued kept.
	write("{storage: " + storage + ", names: [app.test, new.test], any_name: true, max_certificates: 4}")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog(regexp.MustCompile(`msg=reloaded .*tls_listeners=1`), 1)
	waitLog(regexp.MustCompile(`msg="local CA" root=\S+ created=false`), 1)
	if again, _ := os.ReadFile(rootFile); !bytes.Equal(again, rootPEM) {
		t.Fatal("the reload changed the root")
	}
	for _, name := range []string{"app.test", "new.test", "any.test"} {
		body, cert, err := getTLS(t, addr, name, roots)
		if err != nil || body != "ok" {
			t.Fatalf("after the reload, %s: %v %q", name, err, body)
		}
		if name == "app.test" && cert.SerialNumber.String() != serials[name] {
			t.Errorf("the reload issued app.test again")
		}
	}
	// localhost, app.test, new.test, any.test: the bound holds.
	if _, cert, err := getTLS(t, addr, "one-more.test", roots); !errors.As(err, &hostErr) {
		t.Errorf("a fifth certificate: %v, %v; want the default one past max_certificates", err, cert)
	}
	stop()

	// A second start: the same CA, the certificates stored.
	addr, _, waitLog, _ = runSluice(t, cfgPath)
	waitLog(regexp.MustCompile(`msg="local CA" root=\S+ created=false`), 1)
	if again, _ := os.ReadFile(rootFile); !bytes.Equal(again, rootPEM) {
		t.Fatal("a second start made another root")
	}
	for _, name := range []string{"localhost", "app.test"} {
		_, cert, err := getTLS(t, addr, name, roots)
		if err != nil {
			t.Fatalf("second start, %s: %v", name, err)
		}
		if cert.SerialNumber.String() != serials[name] {
			t.Errorf("second start: %s issued again, not served from storage", name)
		}
	}
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", log.String())
	}
}

// TestValidateInternalTLS: sluice validate checks a local CA's storage,
// and makes nothing.
func TestValidateInternalTLS(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	write := func(name, storage string) string {
		p := filepath.Join(dir, name)
		cfg := "listen:\n  - address: 127.0.0.1:0\n    tls:\n      internal: {storage: " + storage + "}\n" +
			"routes: [{upstream: app}]\nupstreams: {app: {servers: [{address: 127.0.0.1:9}]}}\n"
		if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := filepath.Join(dir, "var", "pki")
	for _, tt := range []struct {
		path string
		code int
		out  string
	}{
		{write("good.yaml", good), 0, "ok (1 listener, 1 route, 1 upstream)"},
		{write("bad.yaml", file+"/pki"), 1, "bad.yaml:4: listen[0].tls.internal.storage: " + file + "/pki: cannot be made: " + file + " is not a directory"},
	} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"validate", "-c", tt.path}, &stdout, &stderr)
		if out := stdout.String() + stderr.String(); code != tt.code || !strings.Contains(out, tt.out) {
			t.Errorf("validate %s: exit %d, %q; want %d, %q", tt.path, code, out, tt.code, tt.out)
		}
	}
	if _, err := os.Stat(good); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("validate made the storage: %v", err)
	}
}
