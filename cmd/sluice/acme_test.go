//go:build unix

package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/acmetest"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestRunACME runs sluice run with a TLS listener whose certificate comes
// from pebble, which validates for real (HTTP-01 on the plain listener or
// TLS-ALPN-01 on the TLS one, as the client picks), and a plain listener
// that redirects. The certificate is served and requests proxied; a
// reload that keeps the acme section keeps its manager; sluice run again
// serves the stored certificate and the CA issues no second one; a reload
// that replaces acme with a file stops the manager, and certmagic's work
// with it.
func TestRunACME(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	// pebble validates on fixed ports, so sluice's are found free first.
	tlsAddr, plainAddr := freeAddr(t), freeAddr(t)
	ca := acmetest.Start(t, acmetest.Options{HTTPPort: portOf(plainAddr), TLSPort: portOf(tlsAddr)})
	storage := filepath.Join(dir, "acme")
	cfgPath := filepath.Join(dir, "sluice.yaml")
	acmeTLS := fmt.Sprintf(`      acme:
        domains: [run.sluice.test]
        email: ops@sluice.test
        ca: %s
        ca_root: %s
        storage: %s
`, ca.Directory, ca.TLSRootFile, storage)
	write := func(tlsSection string) {
		cfg := fmt.Sprintf(`listen:
  - address: %s
    tls:
%s  - address: %s
    redirect_https: true
access_log: {enabled: false}
routes: [{upstream: app}]
upstreams:
  app:
    servers: [{address: %s}]
`, tlsAddr, tlsSection, plainAddr, up.Addr())
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(acmeTLS)
	roots := ca.Roots(t)

	first := startRun(t, cfgPath)
	first.waitLog(t, regexp.MustCompile(`msg="ACME certificates managed" domains=\[run.sluice.test\] .*challenges="\[http-01 tls-alpn-01\]"`), 1)
	leaf := servedBy(t, tlsAddr, "run.sluice.test", roots)
	first.waitLog(t, regexp.MustCompile(`msg="ACME certificate obtained" names=\[run.sluice.test\] not_after=\S+ issuer="Pebble Intermediate`), 1)
	if got := httpsGet(t, tlsAddr, "run.sluice.test", roots); got != "ok" {
		t.Errorf("GET over the ACME certificate: %q", got)
	}

	// A reload that keeps the section keeps the manager: no second start.
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	first.waitLog(t, regexp.MustCompile(`msg=reloaded .*tls_listeners=1`), 1)
	if n := strings.Count(first.stderr.String(), `msg="ACME certificates managed"`); n != 1 {
		t.Errorf("the manager was started %d times over a reload that kept its section", n)
	}
	first.stop(t)

	// sluice run again: the stored certificate from the first handshake
	// (listening is logged once it is loaded), no second order.
	second := startRun(t, cfgPath)
	second.waitLog(t, regexp.MustCompile(`msg="ACME certificate loaded from storage" names=\[run.sluice.test\]`), 1)
	if c, err := tls.Dial("tcp", tlsAddr, &tls.Config{ServerName: "run.sluice.test", RootCAs: roots}); err != nil {
		t.Errorf("the first handshake after a restart: %v", err)
	} else {
		if again := c.ConnectionState().PeerCertificates[0]; !again.Equal(leaf) {
			t.Errorf("after a restart, serial %v served, want the stored %v", again.SerialNumber, leaf.SerialNumber)
		}
		c.Close()
	}
	if n := ca.Orders(); n != 1 {
		t.Errorf("pebble issued %d certificates, want 1", n)
	}

	// A reload that replaces acme with a file stops the manager.
	fileCA := tlstest.NewCA(t, "files CA")
	certFile, keyFile := fileCA.Server(t, "run.sluice.test").Write(t, dir, "site")
	write(fmt.Sprintf("      certificates: [{cert: %s, key: %s}]\n", certFile, keyFile))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	second.waitLog(t, regexp.MustCompile(`msg=reloaded .*tls_listeners=1`), 1)
	second.waitLog(t, regexp.MustCompile(`msg="ACME certificates no longer managed" domains=\[run.sluice.test\]`), 1)
	servedBy(t, tlsAddr, "run.sluice.test", fileCA.Pool())
	var left []string
	if !wait.Until(wait.Timeout, func() bool { left = certmagicGoroutines(); return len(left) == 0 }) {
		t.Fatalf("certmagic goroutines %v after a reload removed acme:\n%s", wait.Timeout, strings.Join(left, "\n\n"))
	}
	second.stop(t)
}

// sluice run with acme.dns, as the README shows it: a wildcard obtained
// by DNS-01 (RFC 2136 updates signed with the key of a key file that is
// tsig-keygen's block) from pebble, which validates for real; the
// wildcard serves and proxies a name under it.
func TestRunACMEDNS(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	const secret = "c2x1aWNlIHJ1biBkbnMtMDEga2V5"
	ca := acmetest.Start(t, acmetest.Options{Zone: "sluice.test", TSIGName: "acme-update", TSIGSecret: secret})
	keyFile := filepath.Join(dir, "acme-update.key")
	tlstest.WriteFile(t, keyFile, []byte("key \"acme-update\" {\n\talgorithm hmac-sha256;\n\tsecret \""+secret+"\";\n};\n"))
	tlsAddr := freeAddr(t)
	cfgPath := filepath.Join(dir, "sluice.yaml")
	cfg := fmt.Sprintf(`listen:
  - address: %s
    tls:
      acme:
        domains: ["*.sluice.test"]
        ca: %s
        ca_root: %s
        storage: %s
        dns:
          server: %s
          key_name: acme-update
          key_file: %s
          resolvers: [%q]
access_log: {enabled: false}
routes: [{upstream: app}]
upstreams:
  app:
    servers: [{address: %s}]
`, tlsAddr, ca.Directory, ca.TLSRootFile, filepath.Join(dir, "acme"), ca.DNS, keyFile, ca.DNS, up.Addr())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startRun(t, cfgPath)
	r.waitLog(t, regexp.MustCompile(`msg="ACME certificates managed" domains=\[\*.sluice.test\] .*challenges=\[dns-01\]`), 1)
	roots := ca.Roots(t)
	if leaf := servedBy(t, tlsAddr, "shop.sluice.test", roots); len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "*.sluice.test" {
		t.Errorf("served a certificate for %v, want the wildcard", leaf.DNSNames)
	}
	if got := httpsGet(t, tlsAddr, "shop.sluice.test", roots); got != "ok" {
		t.Errorf("GET over the wildcard: %q", got)
	}
	if applied, refused := ca.Updates(); applied < 1 || refused != 0 {
		t.Errorf("%d updates applied, %d refused", applied, refused)
	}
	r.stop(t)
}

// sluiceRun is sluice run on a goroutine of the test.
type sluiceRun struct {
	stderr *proxytest.Buffer
	done   chan int
}

// startRun runs sluice run -c path until stop.
func startRun(t *testing.T, path string) *sluiceRun {
	t.Helper()
	r := &sluiceRun{stderr: &proxytest.Buffer{}, done: make(chan int, 1)}
	go func() { r.done <- run([]string{"run", "-c", path}, &bytes.Buffer{}, r.stderr) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.stop(t)
		}
		// certmagic recovers panics in its goroutines and logs them
		// (here through slog, which sluice run makes the default).
		if strings.Contains(r.stderr.String(), "panic") {
			t.Error("sluice run logged a panic")
		}
		if t.Failed() {
			t.Logf("sluice run's log:\n%s", r.stderr)
		}
	})
	r.waitLog(t, regexp.MustCompile(`msg=listening address=\S+ tls=true`), 1)
	return r
}

// stop sends TERM and waits for sluice run to exit 0.
func (r *sluiceRun) stop(t *testing.T) {
	t.Helper()
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-r.done:
		r.done <- code // for the cleanup
		if code != 0 {
			t.Errorf("sluice run exited %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sluice run did not stop 10 s after TERM")
	}
}

// waitLog waits up to issueTimeout for n lines of the log to match re.
func (r *sluiceRun) waitLog(t *testing.T, re *regexp.Regexp, n int) [][]string {
	t.Helper()
	var m [][]string
	if !wait.Until(issueTimeout, func() bool { m = re.FindAllStringSubmatch(r.stderr.String(), -1); return len(m) >= n }) {
		t.Fatalf("no %d lines matching %s in %v:\n%s", n, re, issueTimeout, r.stderr)
	}
	return m
}

// issueTimeout bounds the waits for what the CA does (issue, validate)
// and what follows: a test that is failing; a loaded machine takes
// seconds.
const issueTimeout = 30 * time.Second

// servedBy waits up to issueTimeout for addr to serve a certificate for
// sni that verifies against roots.
func servedBy(t *testing.T, addr, sni string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	var leaf *x509.Certificate
	var err error
	if !wait.Until(issueTimeout, func() bool {
		var c *tls.Conn
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: sni, RootCAs: roots})
		if err != nil {
			return false
		}
		leaf = c.ConnectionState().PeerCertificates[0]
		c.Close()
		return true
	}) {
		t.Fatalf("no certificate for %s that verifies served at %s within %v: %v", sni, addr, issueTimeout, err)
	}
	return leaf
}

// httpsGet sends GET / over TLS and returns the body of a 200.
func httpsGet(t *testing.T, addr, sni string, roots *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: sni, RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+sni+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	return string(body)
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	var n int
	fmt.Sscan(p, &n)
	return n
}

// certmagicGoroutines lists the goroutines running certmagic's code but
// for two that are no manager's: its lock-file refresher, which ends by
// itself within 5 s of its lock's release, and the rate limiter it keeps
// for each CA and account for the life of the process.
func certmagicGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/caddyserver/certmagic") &&
			!strings.Contains(g, "keepLockfileFresh") && !strings.Contains(g, "(*RingBufferRateLimiter).loop") {
			found = append(found, g)
		}
	}
	return found
}

// sluice validate checks an acme section's files and directories, and
// starts nothing.
func TestValidateACME(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "private ACME CA")
	root := filepath.Join(dir, "acme-ca.pem")
	tlstest.WriteFile(t, root, ca.PEM)
	notDir := filepath.Join(dir, "file")
	tlstest.WriteFile(t, notDir, []byte("x"))
	write := func(name, caRoot, storage string) string {
		p := filepath.Join(dir, name)
		body := fmt.Sprintf(`listen:
  - address: 127.0.0.1:0
    tls:
      acme:
        domains: [example.com, www.example.com]
        email: ops@example.com
        ca_root: %s
        storage: %s
  - address: 127.0.0.1:0
    redirect_https: true
routes: [{upstream: app}]
upstreams:
  app:
    servers: [{address: 127.0.0.1:9001}]
`, caRoot, storage)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		path string
		code int
		out  string
	}{
		{write("good.yaml", root, filepath.Join(dir, "var", "acme")), 0, "ok (2 listeners, 1 route, 1 upstream)"},
		{write("root.yaml", filepath.Join(dir, "nowhere.pem"), dir), 1,
			"root.yaml:5: listen[0].tls.acme.ca_root: " + filepath.Join(dir, "nowhere.pem") + ": no such file or directory"},
		{write("storage.yaml", root, filepath.Join(notDir, "acme")), 1,
			"storage.yaml:5: listen[0].tls.acme.storage: " + filepath.Join(notDir, "acme") + ": cannot be made: " + notDir + " is not a directory"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run([]string{"validate", "-c", tt.path}, &stdout, &stderr)
		if out := stdout.String() + stderr.String(); code != tt.code || !strings.Contains(out, tt.out) {
			t.Errorf("sluice validate -c %s: exit %d, output %q; want exit %d and %q", tt.path, code, out, tt.code, tt.out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "var")); err == nil {
		t.Error("sluice validate made the storage directory")
	}
	if g := certmagicGoroutines(); len(g) > 0 {
		t.Errorf("sluice validate left certmagic running:\n%s", strings.Join(g, "\n\n"))
	}
}
