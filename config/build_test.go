package config_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy"
)

// serve builds a proxy from the YAML, lets set (if not nil) change the
// Server, and serves it on 127.0.0.1:0. The Resources are closed after
// the test's Shutdown; a test may close them before.
func serve(t *testing.T, yaml string, set func(*proxy.Server)) (string, *config.Resources) {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := config.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gen.Start(ctx)
	srv, res, err := config.NewServer(cfg, gen, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(srv)
	}
	t.Cleanup(func() {
		// Registered before Serve's, so it runs after the Shutdown.
		cancel()
		gen.Close()
		res.Close()
	})
	return proxytest.Serve(t, srv), res
}

// head returns a config with one upstream, app, of servers (each a YAML
// mapping), to which further keys of app may be appended.
func head(servers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nroutes: [{upstream: app}]\nupstreams:\n  app:\n    servers:\n")
	for _, s := range servers {
		fmt.Fprintf(&b, "      - %s\n", s)
	}
	return b.String()
}

// TestBuildHashKey checks that balance: hash and its hash_key reach the
// upstream group that Build makes: requests with the same X-User go to the
// same server. (Package upstream tests the group's balancing and health.)
func TestBuildHashKey(t *testing.T) {
	var servers []string
	for _, n := range []string{"a", "b", "c"} {
		servers = append(servers, "{address: "+upstreamtest.Start(t, upstreamtest.OK(n)).Addr()+"}")
	}
	addr, _ := serve(t, head(servers...)+"    balance: hash\n    hash_key: header:X-User\n", nil)
	proxytest.Sticky(t, addr, "X-User")
}

// TestBuildTLS: an upstream's tls section reaches its servers: verified
// against the configured CA and server name, with the client certificate
// an upstream that requires one asks for.
func TestBuildTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "config CA")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := ca.Client(t, "sluice").Write(t, dir, "cert")
	up := upstreamtest.StartTLS(t, &tls.Config{
		Certificates: []tls.Certificate{*ca.Server(t, "api.internal").TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
	}, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		st, _ := c.TLS()
		c.Respond(200, st.ServerName+" "+st.PeerCertificates[0].Subject.CommonName)
	})
	yaml := head("{address: "+up.Addr()+"}") + fmt.Sprintf("    tls: {server_name: api.internal, ca: %q, cert: %q, key: %q}\n", caFile, certFile, keyFile)
	addr, _ := serve(t, yaml, nil)
	if code, body := proxytest.Get(t, addr, "/", ""); code != 200 || body != "api.internal sluice" {
		t.Fatalf("got %d %q", code, body)
	}
}

// TestBuildTLSFileError: a tls file that cannot be used fails the build
// (and so sluice validate) with the file, the reason and the line.
func TestBuildTLSFileError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "client.pem")
	yaml := head("{address: 127.0.0.1:9}") + fmt.Sprintf("    tls:\n      cert: %q\n      key: %q\n", missing, missing)
	cfg, err := config.Parse("t.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.Build(cfg)
	want := "t.yaml:9: upstream app: tls.cert: open " + missing + ": no such file or directory"
	if err == nil || err.Error() != want {
		t.Fatalf("Build: %v\nwant %s", err, want)
	}
}

// TestBuildUnixServer: a server at "unix:PATH" is reached over its Unix
// socket, with active health checks on, and the upstream's host replaces
// the client's Host.
func TestBuildUnixServer(t *testing.T) {
	up := upstreamtest.StartUnix(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Respond(200, r.Get("Host"))
	})
	yaml := head(`{address: "`+up.Addr()+`"}`) + "    host: app.internal\n    health: {active: {interval: 50ms}}\n"
	addr, _ := serve(t, yaml, nil)
	if code, body := proxytest.Get(t, addr, "/", ""); code != 200 || body != "app.internal" {
		t.Fatalf("got %d %q, want 200 and the upstream's host", code, body)
	}
	// The active checks reach the socket too, with a Host of their own.
	if !up.WaitRequests(3, 10*time.Second) {
		t.Fatalf("%d requests at the socket, want the active checks' too", len(up.Requests()))
	}
}

// TestBuildUnixServerMissing: a server whose socket file does not exist
// is a connect failure reported as RFC 9209's destination_not_found (not
// an unroutable IP address), and the request goes to the next server,
// a POST too: nothing of it was sent.
func TestBuildUnixServerMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone.sock")
	addr, _ := serve(t, head(`{address: "unix:`+missing+`"}`)+"    retry: {tries: 1}\n", nil)
	resp, _ := proxytest.Do(t, addr, "GET / HTTP/1.1\r\nHost: test\r\n\r\n")
	ps := resp.Header.Get("Proxy-Status")
	if resp.StatusCode != 502 || !strings.Contains(ps, "error=destination_not_found") || !strings.Contains(ps, "connect_not_found") {
		t.Fatalf("got %d, Proxy-Status %q; want 502 with error=destination_not_found", resp.StatusCode, ps)
	}

	up := upstreamtest.StartUnix(t, upstreamtest.OK("there"))
	addr, _ = serve(t, head(`{address: "unix:`+missing+`"}`, `{address: "`+up.Addr()+`"}`)+"    balance: round_robin\n", nil)
	for i := 0; i < 4; i++ {
		resp, body := proxytest.Do(t, addr, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 1\r\n\r\nx")
		if resp.StatusCode != 200 || body != "there" {
			t.Fatalf("POST %d: %d %q, want it sent to the socket that exists", i, resp.StatusCode, body)
		}
	}
}

// TestBuildAdminToken: admin.token_file is read by Build (and so by a
// reload and sluice validate), trimmed; a file that cannot be read, or a
// token too short, fails with the file and the reason.
func TestBuildAdminToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	short := filepath.Join(dir, "short")
	os.WriteFile(good, []byte("  0123456789abcdef0123\n"), 0o600)
	os.WriteFile(short, []byte("secret\n"), 0o600)
	tests := []struct {
		file, wantToken, wantErr string
	}{
		{good, "0123456789abcdef0123", ""},
		{short, "", "t.yaml: admin.token_file: " + short + ": the token is 6 bytes, want at least 16"},
		{filepath.Join(dir, "missing"), "", "t.yaml: admin.token_file: open " + filepath.Join(dir, "missing") + ": no such file or directory"},
	}
	for _, tt := range tests {
		yaml := head("{address: 127.0.0.1:9}") + fmt.Sprintf("admin: {address: 127.0.0.1:0, token_file: %q}\n", tt.file)
		cfg, err := config.Parse("t.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		g, err := config.Build(cfg)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tt.file, err)
		case tt.wantErr == "" && g.AdminToken != tt.wantToken:
			t.Errorf("%s: token %q, want %q", tt.file, g.AdminToken, tt.wantToken)
		case tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)):
			t.Errorf("%s: %v, want %s", tt.file, err, tt.wantErr)
		}
	}
}
