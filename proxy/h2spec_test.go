package proxy

import (
	"crypto/tls"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/gotool"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestH2Spec runs h2spec, the conformance suite peers are measured with
// (HAProxy passes its 145 cases, Caddy 141, nginx 120), against a TLS
// listener of the proxy in front of an HTTP/1.1 upstream: every case must
// pass. h2spec is a module tool (go tool h2spec), built on the first run.
func TestH2Spec(t *testing.T) {
	if testing.Short() {
		t.Skip("h2spec takes a few seconds")
	}
	bin := gotool.Binary(t, "h2spec")
	ca := tlstest.NewCA(t, "test CA")
	leaf := ca.Server(t, "localhost", "127.0.0.1")
	up := upstreamtest.Start(t, upstreamtest.OK("hello h2spec\n"))
	hs, _ := startH2(t, peers(testOptions(), up.Addr()), ListenerOptions{TLS: &tls.Config{Certificates: []tls.Certificate{*leaf.TLS}}})
	host, port, _ := strings.Cut(hs.addr, ":")
	out, err := exec.Command(bin, "-t", "-k", "-h", host, "-p", port, "-o", "3").CombinedOutput()
	summary := regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`).FindStringSubmatch(string(out))
	if err != nil || summary == nil || summary[4] != "0" {
		t.Fatalf("h2spec: %v\n%s", err, out)
	}
	t.Logf("h2spec over TLS: %s", summary[0])
}
