//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// gtlsclient runs Debian's ngtcp2 client (ngtcp2 and nghttp3, an HTTP/3
// stack nobody here wrote) for one request to https://localhost:port at
// path, with args before the host (-m POST, -d FILE, --session-file...),
// and returns the response's status, its body (saved by --download) and
// the client's output. The host is numeric, so the client sends the SNI
// "localhost", which the test certificate names.
func gtlsclient(t *testing.T, bin, port, path string, args ...string) (status string, body []byte, out string) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(args, "--exit-on-all-streams-close", "--no-quic-dump", "--no-http-dump", "--timeout=10s",
		"--download", dir, "127.0.0.1", port, "https://localhost:"+port+path)
	cmd := exec.CommandContext(ctx, bin, args...)
	b, err := cmd.CombinedOutput()
	out = string(b)
	if err != nil {
		t.Fatalf("gtlsclient %s: %v\n%s", strings.Join(args, " "), err, tail(out, 40))
	}
	m := regexp.MustCompile(`http: stream 0x0 \[:status: (\d+)\]`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("gtlsclient %s: no response status\n%s", strings.Join(args, " "), tail(out, 40))
	}
	body, err = os.ReadFile(filepath.Join(dir, filepath.Base(path)))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return m[1], body, out
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestGtlsclient: Debian's ngtcp2 client fetches through sluice run over
// HTTP/3: a plain GET, a 1 MiB response body, and a POST with a 1 MiB
// body, each as the upstream answered. Then, resumed with the session
// and transport parameters of an earlier connection, it sends its
// request in 0-RTT: a GET is forwarded with Early-Data: 1, a POST is
// answered 425 Too Early and never reaches the upstream.
func TestGtlsclient(t *testing.T) {
	bin := need(t, "gtlsclient", "Debian: apt-get install ngtcp2-client")
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		switch {
		case r.Method == "POST":
			c.Respond(200, string(r.Decoded))
		case r.Target == "/big":
			c.Respond(200, string(big))
		default:
			c.Respond(200, "hello over HTTP/3\n", upstreamtest.Field{Name: "Early-Data-Seen", Value: r.Get("Early-Data")})
		}
	})
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "localhost").Write(t, dir, "site")
	s := startRunning(t, fmt.Sprintf(`listen:
  - address: 127.0.0.1:0
    tls:
      certificates: [{cert: %s, key: %s}]
    protocols: [h3, h2, http/1.1]
    early_data: safe
access_log: {enabled: true, path: %s, buffer: 0}
`+upstreamsOf, cert, key, filepath.Join(dir, "access.log"), up.Addr()))
	_, port, _ := strings.Cut(s.addr(0), ":")

	status, body, _ := gtlsclient(t, bin, port, "/hello")
	if status != "200" || string(body) != "hello over HTTP/3\n" {
		t.Errorf("GET: %s %q", status, body)
	}
	status, body, _ = gtlsclient(t, bin, port, "/big")
	if status != "200" || !bytes.Equal(body, big) {
		t.Errorf("GET of 1 MiB: %s, %d bytes (equal: %v)", status, len(body), bytes.Equal(body, big))
	}
	post := filepath.Join(dir, "post")
	sent := bytes.Repeat([]byte("posted through sluice\n"), 1<<20/22+1)
	if err := os.WriteFile(post, sent, 0o644); err != nil {
		t.Fatal(err)
	}
	status, body, _ = gtlsclient(t, bin, port, "/echo", "-m", "POST", "-d", post)
	if status != "200" || !bytes.Equal(body, sent) {
		t.Errorf("POST of %d bytes: %s, %d bytes back (equal: %v)", len(sent), status, len(body), bytes.Equal(body, sent))
	}
	if n := up.Count("POST", "/echo"); n != 1 {
		t.Errorf("the upstream saw %d POSTs, want 1", n)
	}
	access, err := os.ReadFile(filepath.Join(dir, "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`method=POST .*target=/echo status=200 .*protocol=HTTP/3 .*user_agent="nghttp3/ngtcp2 client"`).Match(access) {
		t.Errorf("no access log line of the HTTP/3 client's POST:\n%s", access)
	}

	// 0-RTT: a first connection keeps its session ticket and transport
	// parameters; the next ones send their request before the handshake.
	session, params := filepath.Join(dir, "session"), filepath.Join(dir, "params")
	resume := []string{"--session-file", session, "--tp-file", params}
	if status, _, _ := gtlsclient(t, bin, port, "/first", resume...); status != "200" {
		t.Fatalf("first connection: %s", status)
	}
	if _, err := os.Stat(session); err != nil {
		t.Fatalf("gtlsclient kept no session: %v", err)
	}
	status, body, out := gtlsclient(t, bin, port, "/early-get", resume...)
	if status != "200" || string(body) != "hello over HTTP/3\n" {
		t.Errorf("GET in 0-RTT: %s %q", status, body)
	}
	if !strings.Contains(out, "type=0RTT") || strings.Contains(out, "Early data was rejected") {
		t.Fatalf("gtlsclient sent no 0-RTT, or it was rejected:\n%s", tail(out, 60))
	}
	var early string
	for _, r := range up.Requests() {
		if r.Target == "/early-get" {
			early = r.Get("Early-Data")
		}
	}
	if early != "1" {
		t.Errorf("the GET sent in 0-RTT reached the upstream with Early-Data %q, want 1", early)
	}
	status, _, out = gtlsclient(t, bin, port, "/early-post", append(resume, "-m", "POST", "-d", post)...)
	if status != "425" {
		t.Errorf("POST in 0-RTT: %s, want 425\n%s", status, tail(out, 60))
	}
	if !strings.Contains(out, `[proxy-status: sluice; error=http_request_error; details="unsafe request in early data"]`) {
		t.Errorf("the 425 has no Proxy-Status:\n%s", tail(out, 60))
	}
	if n := up.Count("POST", "/early-post"); n != 0 {
		t.Errorf("the POST sent in 0-RTT reached the upstream %d times", n)
	}
}
