//go:build unix

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/sluice-proxy/sluice/admin"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestAdminH3: an open HTTP/3 connection is counted under the protocol h3
// by the admin API (what the status page shows) and by
// sluice_client_connections, beside the listener's TCP connections, and
// is no longer counted once its client closed it.
func TestAdminH3(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	cfg, ca := h3Config(t, dir, up.Addr(), "10s")
	cfg = strings.Replace(cfg, "access_log: {enabled: true}\n", fmt.Sprintf("access_log: {enabled: false}\nadmin: {address: %s}\n", freeAddr(t)), 1)
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startAdminRun(t, path)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, r.proxy, &tls.Config{RootCAs: ca.Pool(), ServerName: "example.com", NextProtos: []string{"h3"}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if status, body, err := h3Get(qc, "/"); err != nil || status != 200 || body != "ok" {
		qc.CloseWithError(0, "")
		t.Fatalf("GET over HTTP/3: %d %q %v", status, body, err)
	}
	open := func() int {
		var u admin.Upstreams
		if code, body := r.call(t, "GET", "/api/upstreams", &u); code != 200 {
			t.Fatalf("/api/upstreams: %d %s", code, body)
		}
		for _, c := range u.Connections {
			if c.Protocol == "h3" {
				if c.Listener != r.proxy {
					t.Errorf("an h3 connection on listener %q, want %q", c.Listener, r.proxy)
				}
				return c.Open
			}
		}
		return 0
	}
	if n := open(); n != 1 {
		qc.CloseWithError(0, "")
		t.Fatalf("/api/upstreams: %d open h3 connections, want 1", n)
	}
	_, metrics := r.call(t, "GET", "/metrics", nil)
	if want := `sluice_client_connections{listener="` + r.proxy + `",protocol="h3"} 1`; !strings.Contains(metrics, want+"\n") {
		t.Errorf("/metrics lacks %s", want)
	}
	qc.CloseWithError(0, "")
	wait.For(t, "the closed HTTP/3 connection uncounted", func() bool { return open() == 0 })
}
