//go:build unix

package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"math/big"
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
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestRunTLS runs sluice run with a TLS listener and a plain one that
// redirects to it, then renews the certificate and sends SIGHUP: a
// keep-alive connection opened before goes on working with what it had,
// a new handshake gets the renewed certificate, and a client resumes the
// session it had before the reload (the ticket keys outlive it). A reload
// whose certificate cannot be read changes nothing and says which file.
func TestRunTLS(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	first, renewed := ca.Server(t, "example.com"), ca.Server(t, "example.com")
	certFile, keyFile := first.Write(t, dir, "site")
	cfgPath := filepath.Join(dir, "sluice.yaml")
	cfg := fmt.Sprintf(`listen:
  - address: 127.0.0.1:0
    tls:
      certificates: [{cert: %s, key: %s}]
  - address: 127.0.0.1:0
    redirect_https: true
access_log: {enabled: false}
routes: [{upstream: app}]
upstreams:
  app:
    servers: [{address: %s}]
`, certFile, keyFile, up.Addr())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr proxytest.Buffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"run", "-c", cfgPath}, &bytes.Buffer{}, &stderr) }()
	defer func() {
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("sluice run exited %d:\n%s", code, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("sluice run did not stop 10 s after TERM")
		}
	}()
	waitLog := func(re *regexp.Regexp, n int) [][]string {
		t.Helper()
		var m [][]string
		if !wait.Until(wait.Timeout, func() bool { m = re.FindAllStringSubmatch(stderr.String(), -1); return len(m) >= n }) {
			t.Fatalf("no %d lines matching %s in %v:\n%s", n, re, wait.Timeout, stderr.String())
		}
		return m
	}
	tlsAddr := waitLog(regexp.MustCompile(`msg=listening address=(127\.0\.0\.1:\d+) tls=true`), 1)[0][1]
	redirect := waitLog(regexp.MustCompile(`msg=listening address=(127\.0\.0\.1:\d+) redirect_https_port=(\d+)`), 1)[0]
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	if redirect[2] != tlsPort {
		t.Errorf("redirects name port %s, want the TLS listener's, %s", redirect[2], tlsPort)
	}

	// The plain listener redirects, naming the TLS listener's port.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get("http://" + redirect[1] + "/a?b=c")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "https://127.0.0.1:" + tlsPort + "/a?b=c"; resp.StatusCode != 308 || resp.Header.Get("Location") != want {
		t.Errorf("plain listener: %d Location %q, want 308 %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}

	sessions := tls.NewLRUClientSessionCache(4)
	dial := func(cache tls.ClientSessionCache) *tls.Conn {
		t.Helper()
		c, err := tls.Dial("tcp", tlsAddr, &tls.Config{ServerName: "example.com", RootCAs: ca.Pool(), ClientSessionCache: cache})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	get := func(c *tls.Conn, br *bufio.Reader) {
		t.Helper()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
	}
	serial := func(c *tls.Conn) *big.Int { return c.ConnectionState().PeerCertificates[0].SerialNumber }

	kept := dial(sessions)
	keptReader := bufio.NewReader(kept)
	get(kept, keptReader) // the read takes in the TLS 1.3 session ticket
	if serial(kept).Cmp(first.Serial()) != 0 {
		t.Fatal("the first connection did not get the first certificate")
	}
	if got := up.Requests()[0].Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("X-Forwarded-Proto %q upstream, want https", got)
	}

	renewed.Write(t, dir, "site")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog(regexp.MustCompile(`msg=reloaded .*tls_listeners=1`), 1)

	get(kept, keptReader) // the connection from before the reload goes on
	if fresh := dial(nil); serial(fresh).Cmp(renewed.Serial()) != 0 {
		t.Error("a new handshake after the reload did not get the renewed certificate")
	}
	if resumed := dial(sessions); !resumed.ConnectionState().DidResume {
		t.Error("a client's session from before the reload did not resume after it")
	}

	// A reload that cannot read the certificate changes nothing.
	tlstest.WriteFile(t, certFile, []byte("garbage\n"))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	failed := waitLog(regexp.MustCompile(`msg="reload failed; still serving the previous configuration" error=(.*)`), 1)[0][1]
	if !strings.Contains(failed, certFile+": no PEM CERTIFICATE block") {
		t.Errorf("the failed reload's line does not name the file and the reason: %s", failed)
	}
	if after := dial(nil); serial(after).Cmp(renewed.Serial()) != 0 {
		t.Error("after a failed reload, a new handshake did not get the certificate in force")
	}
}

// TestReloadNewServerKeepsTicketKeys: a reload that starts a new server
// (a timeout changed) on a kept TLS socket goes on with the old server's
// session ticket keys, so that a client resumes its session after it, as
// after a reload that keeps the server.
func TestReloadNewServerKeepsTicketKeys(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.Server(t, "example.com").Write(t, dir, "site")
	cfgPath := filepath.Join(dir, "sluice.yaml")
	write := func(idle string) {
		cfg := fmt.Sprintf(`listen:
  - address: 127.0.0.1:0
    tls:
      certificates: [{cert: %s, key: %s}]
timeouts: {idle: %s}
access_log: {enabled: false}
routes: [{upstream: app}]
upstreams:
  app:
    servers: [{address: %s}]
`, certFile, keyFile, idle, up.Addr())
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("60s")
	var stderr proxytest.Buffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"run", "-c", cfgPath}, &bytes.Buffer{}, &stderr) }()
	defer func() {
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("sluice run exited %d:\n%s", code, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("sluice run did not stop 10 s after TERM")
		}
	}()
	waitLog := func(re *regexp.Regexp) []string {
		t.Helper()
		var m []string
		if !wait.Until(wait.Timeout, func() bool { m = re.FindStringSubmatch(stderr.String()); return m != nil }) {
			t.Fatalf("no line matching %s in %v:\n%s", re, wait.Timeout, stderr.String())
		}
		return m
	}
	addr := waitLog(regexp.MustCompile(`msg=listening address=(127\.0\.0\.1:\d+) tls=true`))[1]
	sessions := tls.NewLRUClientSessionCache(4)
	get := func() *tls.Conn {
		t.Helper()
		c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "example.com", RootCAs: ca.Pool(), ClientSessionCache: sessions})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil) // takes in the session ticket
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("got %d", resp.StatusCode)
		}
		return c
	}
	get()
	write("30s")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog(regexp.MustCompile(`msg=reloaded .*tls_listeners=1 new_server=\[timeouts\]`))
	if c := get(); !c.ConnectionState().DidResume {
		t.Error("a client's session from before a reload that started a new server did not resume after it")
	}
}
