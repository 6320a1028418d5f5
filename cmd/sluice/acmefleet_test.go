//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-proxy/sluice/internal/acmetest"
	"github.com/sluice-proxy/sluice/internal/redistest"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestRunACMEFleet runs three sluice processes, as a fleet, with their
// ACME storage in one Redis (storage: redis, the key file they share), and
// pebble validating DNS-01: the CA issues one certificate for the name,
// and each of the three serves it.
func TestRunACMEFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice and runs three processes: skipped with -short")
	}
	srv := redistest.Start(t)
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	const secret = "c2x1aWNlIHJ1biBkbnMtMDEga2V5"
	ca := acmetest.Start(t, acmetest.Options{Zone: "sluice.test", TSIGName: "acme-update", TSIGSecret: secret})
	tsigFile := filepath.Join(dir, "acme-update.key")
	tlstest.WriteFile(t, tsigFile, []byte(secret+"\n"))
	storageKey := filepath.Join(dir, "acme-storage.key")
	tlstest.WriteFile(t, storageKey, []byte("AwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISI=\n"))
	bin := buildSluice(t, dir, "sluice", "fleet")
	var addrs []string
	var logs []*processLog
	for i := range 3 {
		addr := freeAddr(t)
		cfgPath := filepath.Join(dir, fmt.Sprintf("sluice%d.yaml", i))
		cfg := fmt.Sprintf(`listen:
  - address: %s
    tls:
      acme:
        domains: [fleet.sluice.test]
        ca: %s
        ca_root: %s
        storage: redis
        storage_key_file: %s
        dns: {server: %s, key_name: acme-update, key_file: %s, resolvers: [%q]}
redis: {address: %q}
access_log: {enabled: false}
routes: [{upstream: app}]
upstreams:
  app:
    servers: [{address: %s}]
`, addr, ca.Directory, ca.TLSRootFile, storageKey, ca.DNS, tsigFile, ca.DNS, srv.Addr, up.Addr())
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd, log := startSluice(t, bin, cfgPath)
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			waitExited(t, cmd.Process.Pid, log)
			if t.Failed() {
				t.Logf("sluice %d's log:\n%s", i, log.buf.String())
			}
		})
		addrs, logs = append(addrs, addr), append(logs, log)
	}
	for i, l := range logs {
		l.wait(t, fmt.Sprintf("sluice %d managing its certificate in Redis", i),
			regexp.MustCompile(`msg="ACME certificates managed" domains=\[fleet.sluice.test\] .*storage="redis `+regexp.QuoteMeta(srv.Addr)), 1)
	}
	roots := ca.Roots(t)
	first := servedBy(t, addrs[0], "fleet.sluice.test", roots)
	for i, addr := range addrs[1:] {
		if leaf := servedBy(t, addr, "fleet.sluice.test", roots); !leaf.Equal(first) {
			t.Errorf("sluice %d serves serial %v, sluice 0 %v", i+1, leaf.SerialNumber, first.SerialNumber)
		}
		if got := httpsGet(t, addr, "fleet.sluice.test", roots); got != "ok" {
			t.Errorf("GET through sluice %d: %q", i+1, got)
		}
	}
	if n := ca.Orders(); n != 1 {
		t.Errorf("pebble issued %d certificates to three instances, want 1", n)
	}
	obtained := 0
	for _, l := range logs {
		obtained += strings.Count(l.buf.String(), `msg="ACME certificate obtained"`)
	}
	if obtained != 1 {
		t.Errorf("%d instances say they obtained the certificate, want 1", obtained)
	}
}
