package acme

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ocsp"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/internal/acmetest"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/tlsterm"
)

// site answers every request itself, 200 "site".
type site struct{}

func (site) UpstreamPeer(*proxy.Session) (*proxy.Peer, error) {
	return nil, &fault.Error{Kind: fault.NoUpstream, Source: fault.Internally}
}

func (site) RequestFilter(*proxy.Session) *proxy.Response { return proxy.Text(200, "site") }

// server is a sluice on 127.0.0.1 as sluice run serves ACME: a TLS
// listener whose certificates come from a Source, and a plain one that
// answers HTTP-01 challenges and redirects the rest to https.
type server struct {
	srv         *proxy.Server
	tls, plain  net.Addr
	errors, log *syncBuffer
}

// serve listens on two ports of 127.0.0.1 and serves until the test ends;
// the certificates' Source is given later (set), as the listeners must be
// bound before pebble is told their ports.
func serve(t *testing.T) (*server, func(tlsterm.Source)) {
	t.Helper()
	s := &server{errors: &syncBuffer{}, log: &syncBuffer{}}
	s.srv = &proxy.Server{Handler: site{},
		ErrorLog: slog.New(slog.NewTextHandler(s.errors, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	tlsLn, err := proxy.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plainLn, err := proxy.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.tls, s.plain = tlsLn.Addr(), plainLn.Addr()
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.srv.Shutdown(ctx)
		wg.Wait()
		if t.Failed() {
			t.Logf("manager's log:\n%s\nserver's error log:\n%s", s.log, s.errors)
		}
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.srv.ServeWith(plainLn, proxy.ListenerOptions{Handler: &proxy.RedirectHTTPS{}, Filter: HTTPChallenges{}})
	}()
	return s, func(src tlsterm.Source) {
		sw, err := tlsterm.NewSwitch(tlsterm.Settings{Certificates: src, NextProtos: append(proxy.Protocols(), tlsterm.ACMETLS1)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.srv.ServeTLS(tlsLn, sw.Config())
		}()
	}
}

// port returns the port of a TCP address.
func port(a net.Addr) int { return a.(*net.TCPAddr).Port }

// manager makes a Manager of pebble for domains, storing in dir, logging
// to s.log.
func (s *server) manager(t *testing.T, ca *acmetest.CA, dir string, domains ...string) *Manager {
	t.Helper()
	m, err := New(Options{Domains: domains, CA: ca.Directory, Roots: ca.TLSRoots, Storage: dir,
		Log: slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// dnsManager makes a Manager of pebble for domains that answers DNS-01
// as d says, asking the CA's DNS server to find zones and watch records,
// storing in a directory of the test's, logging to s.log.
func (s *server) dnsManager(t *testing.T, ca *acmetest.CA, d DNS, domains ...string) *Manager {
	t.Helper()
	d.Resolvers = []string{ca.DNS}
	m, err := New(Options{Domains: domains, CA: ca.Directory, Roots: ca.TLSRoots, Storage: t.TempDir(), DNS: &d,
		Log: slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// handshake makes a TLS handshake with the server for sni and returns the
// certificate chain served, verified against roots.
func (s *server) handshake(sni string, roots *x509.CertPool) ([]*x509.Certificate, []byte, error) {
	nc, err := net.DialTimeout("tcp", s.tls.String(), 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(nc, &tls.Config{ServerName: sni, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		return nil, nil, err
	}
	st := tc.ConnectionState()
	return st.PeerCertificates, st.OCSPResponse, nil
}

// served waits up to issueTimeout for the server to serve a certificate for sni
// that verifies against roots, and returns it.
func (s *server) served(t *testing.T, sni string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	var chain []*x509.Certificate
	var err error
	if !wait.Until(issueTimeout, func() bool { chain, _, err = s.handshake(sni, roots); return err == nil }) {
		t.Fatalf("no certificate for %s served within %v: %v", sni, issueTimeout, err)
	}
	return chain[0]
}

// issueTimeout bounds the waits for what the CA does (issue, validate,
// renew): a test that is failing; a loaded machine takes seconds.
const issueTimeout = 30 * time.Second

// get sends GET path with Host host to the plain listener.
func (s *server) get(t *testing.T, host, path string) (*http.Response, string) {
	t.Helper()
	nc, err := net.Dial("tcp", s.plain.String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host)
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// A certificate is obtained with the CA validating HTTP-01 for real on the
// plain listener, and served by SNI; the challenge's path of a token not
// under way is redirected as any other request.
func TestObtainHTTP01(t *testing.T) {
	s, use := serve(t)
	ca := acmetest.Start(t, acmetest.Options{HTTPPort: port(s.plain)})
	m := s.manager(t, ca, t.TempDir(), "http01.sluice.test")
	use(m)
	if _, _, err := s.handshake("http01.sluice.test", nil); err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Errorf("before the certificate is obtained: %v, want the handshake refused (internal error)", err)
	}
	if err := m.Start(context.Background(), Challenges{HTTP: s.plain}); err != nil {
		t.Fatal(err)
	}
	leaf := s.served(t, "http01.sluice.test", ca.Roots(t))
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "http01.sluice.test" {
		t.Errorf("served a certificate for %v", leaf.DNSNames)
	}
	if out := ca.Output(); !strings.Contains(out, "validate w/ HTTP: http://http01.sluice.test:") {
		t.Errorf("pebble did not validate HTTP-01:\n%s", out)
	}
	if resp, _ := s.get(t, "http01.sluice.test", "/.well-known/acme-challenge/not-a-token"); resp.StatusCode != 308 {
		t.Errorf("a token not under way: got %d, want the redirect, 308", resp.StatusCode)
	}
	if !strings.Contains(s.log.String(), `msg="ACME certificate obtained" names=[http01.sluice.test] not_after=`) {
		t.Errorf("no line for the certificate obtained:\n%s", s.log)
	}
}

// A wildcard certificate is obtained by DNS-01: the Manager writes the
// TXT records by RFC 2136 updates signed with its TSIG key to the zone's
// server (the one the CA asks), the CA validates them for real, and the
// records are removed after. The wildcard serves the names under it; the
// zone's own name has its certificate. No listener answers a challenge.
func TestObtainDNS01Wildcard(t *testing.T) {
	s, use := serve(t)
	const key, secret = "acme-update.", "c2x1aWNlIHRlc3QgdHNpZyBrZXkgc2VjcmV0IQ=="
	ca := acmetest.Start(t, acmetest.Options{Zone: "sluice.test", TSIGName: key, TSIGSecret: secret})
	m := s.dnsManager(t, ca, DNS{Server: ca.DNS, KeyName: key, Secret: secret}, "*.sluice.test", "sluice.test")
	use(m)
	if err := m.Start(context.Background(), Challenges{}); err != nil {
		t.Fatal(err)
	}
	roots := ca.Roots(t)
	for _, sni := range []string{"www.sluice.test", "API.sluice.test"} {
		if leaf := s.served(t, sni, roots); !slices.Equal(leaf.DNSNames, []string{"*.sluice.test"}) {
			t.Errorf("%s: served a certificate for %v, want the wildcard", sni, leaf.DNSNames)
		}
	}
	if leaf := s.served(t, "sluice.test", roots); !slices.Equal(leaf.DNSNames, []string{"sluice.test"}) {
		t.Errorf("sluice.test: served a certificate for %v", leaf.DNSNames)
	}
	// Two records added (pebble validated them: no listener answers a
	// challenge here) and two removed, each signed; none refused.
	wait.Within(t, issueTimeout, "the challenge records removed", func() bool {
		applied, _ := ca.Updates()
		return applied == 4 && len(ca.TXT("_acme-challenge.sluice.test")) == 0
	})
	if applied, refused := ca.Updates(); applied != 4 || refused != 0 {
		t.Errorf("%d updates applied, %d refused; want 4 and 0", applied, refused)
	}
	if !strings.Contains(s.log.String(), `challenges=[dns-01]`) {
		t.Errorf("the Manager does not say it answers DNS-01:\n%s", s.log)
	}
	// A name two labels under the wildcard is not covered by it.
	if _, _, err := s.handshake("a.b.sluice.test", roots); err == nil {
		t.Error("a.b.sluice.test: a certificate verified, yet the wildcard covers one label only")
	}
	// A client that sends no name gets the first domain's: the wildcard.
	nc, err := tls.Dial("tcp", s.tls.String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("no SNI: %v", err)
	}
	if got := nc.ConnectionState().PeerCertificates[0].DNSNames; !slices.Equal(got, []string{"*.sluice.test"}) {
		t.Errorf("no SNI: served %v, want the wildcard", got)
	}
	nc.Close()
}

// A challenge delegated by a CNAME (_acme-challenge.sluice.test, in a DNS
// that takes no updates, to a name in a zone that does): the record is
// written at OverrideDomain, and the CA, following the CNAME, validates it.
func TestDNS01Delegated(t *testing.T) {
	s, use := serve(t)
	const key, secret = "acme-update.", "c2VjcmV0"
	ca := acmetest.Start(t, acmetest.Options{Zone: "acme-zone.test", TSIGName: key, TSIGSecret: secret,
		CNAMEs: map[string]string{"_acme-challenge.sluice.test": "sluice.acme-zone.test"}})
	m := s.dnsManager(t, ca, DNS{Server: ca.DNS, KeyName: key, Secret: secret, OverrideDomain: "sluice.acme-zone.test."}, "*.sluice.test")
	use(m)
	if err := m.Start(context.Background(), Challenges{}); err != nil {
		t.Fatal(err)
	}
	if leaf := s.served(t, "www.sluice.test", ca.Roots(t)); !slices.Equal(leaf.DNSNames, []string{"*.sluice.test"}) {
		t.Errorf("served a certificate for %v, want the wildcard", leaf.DNSNames)
	}
	if applied, refused := ca.Updates(); applied < 1 || refused != 0 {
		t.Errorf("%d updates applied, %d refused", applied, refused)
	}
}

// A hook program writes and removes the records (DNS.Exec): run with
// present and cleanup, the name and the value, after the arguments
// given; a hook that fails fails the order with its output.
func TestDNS01Hook(t *testing.T) {
	dir := t.TempDir()
	hookFile := filepath.Join(dir, "hook.sh")
	// $1 is the argument configured before the action: the directory.
	script := `#!/bin/sh
set -e
dir=$1 action=$2 name=$(echo "$3" | tr A-Z a-z | sed 's/\.$//') value=$4
case $action in
present) echo "$value" >> "$dir/$name" ;;
cleanup) grep -vxF "$value" "$dir/$name" > "$dir/$name.new" || true; mv "$dir/$name.new" "$dir/$name" ;;
*) echo "unknown action $action" >&2; exit 2 ;;
esac
echo "$action $name" >> "$dir/calls"
`
	if err := os.WriteFile(hookFile, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s, use := serve(t)
	ca := acmetest.Start(t, acmetest.Options{Zone: "sluice.test", TXTDir: dir})
	m := s.dnsManager(t, ca, DNS{Exec: []string{hookFile, dir}}, "*.sluice.test")
	use(m)
	if err := m.Start(context.Background(), Challenges{}); err != nil {
		t.Fatal(err)
	}
	if leaf := s.served(t, "www.sluice.test", ca.Roots(t)); !slices.Equal(leaf.DNSNames, []string{"*.sluice.test"}) {
		t.Errorf("served a certificate for %v, want the wildcard", leaf.DNSNames)
	}
	wait.Within(t, issueTimeout, "the hook's cleanup", func() bool {
		calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
		return string(calls) == "present _acme-challenge.sluice.test\ncleanup _acme-challenge.sluice.test\n"
	})
	if left, _ := os.ReadFile(filepath.Join(dir, "_acme-challenge.sluice.test")); len(bytes.TrimSpace(left)) != 0 {
		t.Errorf("records left after the cleanup: %q", left)
	}

	// A hook that fails: the order fails, logged with its output.
	failing := filepath.Join(dir, "fail.sh")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho no credentials for $2 >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s2, use2 := serve(t)
	m2 := s2.dnsManager(t, ca, DNS{Exec: []string{failing}}, "*.other.sluice.test")
	use2(m2)
	if err := m2.Start(context.Background(), Challenges{}); err != nil {
		t.Fatal(err)
	}
	wait.Within(t, issueTimeout, "the failing hook logged", func() bool {
		return strings.Contains(s2.log.String(), "dns hook "+failing+" present _acme-challenge.other.sluice.test.: exit status 3: no credentials for _acme-challenge.other.sluice.test.")
	})
}

// A DNS-01 update the zone's server refuses (a key it does not know) fails
// the order, and says why; nothing is served.
func TestDNS01Refused(t *testing.T) {
	s, use := serve(t)
	ca := acmetest.Start(t, acmetest.Options{Zone: "sluice.test", TSIGName: "acme-update.", TSIGSecret: "c2VjcmV0"})
	m := s.dnsManager(t, ca, DNS{Server: ca.DNS, KeyName: "other-key.", Secret: "c2VjcmV0"}, "*.sluice.test")
	use(m)
	if err := m.Start(context.Background(), Challenges{}); err != nil {
		t.Fatal(err)
	}
	wait.Within(t, issueTimeout, "the refused update logged", func() bool {
		return strings.Contains(s.log.String(), "dns update of sluice.test. at "+ca.DNS+": the server answered REFUSED")
	})
	if applied, refused := ca.Updates(); applied != 0 || refused == 0 {
		t.Errorf("%d updates applied, %d refused; want none applied", applied, refused)
	}
	if _, _, err := s.handshake("www.sluice.test", nil); err == nil {
		t.Error("a certificate served, though the update was refused")
	}
}

// A certificate is obtained with the CA validating TLS-ALPN-01 for real on
// the TLS listener. A client asking for another name (or none) gets the
// certificate of the domain; an acme-tls/1 handshake for no challenge
// under way is refused without an error logged.
func TestObtainTLSALPN01(t *testing.T) {
	s, use := serve(t)
	ca := acmetest.Start(t, acmetest.Options{TLSPort: port(s.tls)})
	m := s.manager(t, ca, t.TempDir(), "alpn.sluice.test")
	use(m)
	if err := m.Start(context.Background(), Challenges{TLSALPN: s.tls}); err != nil {
		t.Fatal(err)
	}
	roots := ca.Roots(t)
	leaf := s.served(t, "alpn.sluice.test", roots)
	if !strings.Contains(s.errors.String(), `msg="ACME TLS-ALPN-01 validation handshake" client=127.0.0.1 sni=alpn.sluice.test`) {
		t.Errorf("the server saw no TLS-ALPN-01 validation:\n%s", s.errors)
	}
	for _, sni := range []string{"", "other.test"} {
		nc, err := tls.Dial("tcp", s.tls.String(), &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("SNI %q: %v", sni, err)
		}
		got := nc.ConnectionState().PeerCertificates[0]
		nc.Close()
		if !got.Equal(leaf) {
			t.Errorf("SNI %q got a certificate for %v, want the domain's", sni, got.DNSNames)
		}
	}
	before := s.log.String()
	_, err := tls.Dial("tcp", s.tls.String(), &tls.Config{ServerName: "alpn.sluice.test", InsecureSkipVerify: true, NextProtos: []string{tlsterm.ACMETLS1}})
	if err == nil {
		t.Error("an acme-tls/1 handshake for no challenge under way completed")
	}
	if after := strings.TrimPrefix(s.log.String(), before); strings.Contains(after, "level=ERROR") {
		t.Errorf("an acme-tls/1 handshake logged an error:\n%s", after)
	}
}

// Certificates obtained are kept in storage: a Manager started again on it
// serves the same certificate once Ready, and the CA issues only the
// certificate of a domain added.
func TestRestartReusesStorage(t *testing.T) {
	s, use := serve(t)
	ca := acmetest.Start(t, acmetest.Options{})
	dir := t.TempDir()
	first := s.manager(t, ca, dir, "restart.sluice.test")
	var src switchable
	src.set(first)
	use(&src)
	if err := first.Start(context.Background(), Challenges{TLSALPN: s.tls}); err != nil {
		t.Fatal(err)
	}
	roots := ca.Roots(t)
	leaf := s.served(t, "restart.sluice.test", roots)
	first.Stop()
	if _, _, err := s.handshake("restart.sluice.test", roots); err == nil {
		t.Error("a stopped Manager's certificate was served")
	}

	second := s.manager(t, ca, dir, "restart.sluice.test", "new.sluice.test")
	if err := second.Start(context.Background(), Challenges{TLSALPN: s.tls}); err != nil {
		t.Fatal(err)
	}
	// Ready waits for the stored certificate, not for the one to obtain:
	// the first handshake after it gets the stored certificate.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := second.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	src.set(second)
	if chain, _, err := s.handshake("restart.sluice.test", roots); err != nil || !chain[0].Equal(leaf) {
		t.Errorf("after a restart, the first handshake: %v; want the stored certificate", err)
	}
	s.served(t, "new.sluice.test", roots)
	if n := ca.Orders(); n != 2 {
		t.Errorf("the CA issued %d certificates, want 2: restart.sluice.test once, new.sluice.test", n)
	}
}

// switchable is a Source whose Manager a test replaces, as a reload does.
type switchable struct {
	mu sync.Mutex
	m  *Manager
}

func (s *switchable) set(m *Manager) {
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
}

func (s *switchable) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	m := s.m
	s.mu.Unlock()
	return m.GetCertificate(hello)
}

// A certificate in its renewal window is renewed, and the renewed one
// served: pebble's certificates live 10 s here, and they are renewed with
// 90% of their life left.
func TestRenewal(t *testing.T) {
	s, use := serve(t)
	ca := acmetest.Start(t, acmetest.Options{Validity: 10 * time.Second})
	m, err := New(Options{Domains: []string{"renew.sluice.test"}, CA: ca.Directory, Roots: ca.TLSRoots, Storage: t.TempDir(),
		Log:                slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		RenewalWindowRatio: 0.9, RenewCheckInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	use(m)
	if err := m.Start(context.Background(), Challenges{TLSALPN: s.tls}); err != nil {
		t.Fatal(err)
	}
	roots := ca.Roots(t)
	first := s.served(t, "renew.sluice.test", roots)
	var renewed *x509.Certificate
	if !wait.Until(issueTimeout, func() bool {
		var chain []*x509.Certificate
		chain, _, err = s.handshake("renew.sluice.test", roots)
		if err == nil && chain[0].SerialNumber.Cmp(first.SerialNumber) != 0 {
			renewed = chain[0]
		}
		return renewed != nil
	}) {
		t.Fatalf("no renewed certificate served within %v (last error %v)", issueTimeout, err)
	}
	if !renewed.NotAfter.After(first.NotAfter) {
		t.Errorf("the renewed certificate expires %v, not after the first, %v", renewed.NotAfter, first.NotAfter)
	}
	if !strings.Contains(s.log.String(), `msg="ACME certificate renewed" names=[renew.sluice.test] not_after=`) {
		t.Errorf("no line for the renewal:\n%s", s.log)
	}
}

// certmagicGoroutines lists the stacks of the goroutines running
// certmagic's code, but for two that are not a Manager's: its lock-file
// refresher, which ends by itself within 5 s of its lock's release, and
// the rate limiter it keeps for each CA and account for the life of the
// process (one for sluice's, which every Manager with the same CA and
// email shares).
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

// Stop ends what the Manager runs: here an issuance that keeps failing
// (the CA is not there) and waits to try again, and certmagic's
// maintenance; it logs no error for what it cancelled.
func TestStopEndsGoroutines(t *testing.T) {
	if g := certmagicGoroutines(); len(g) > 0 {
		t.Fatalf("certmagic goroutines running before the test:\n%s", strings.Join(g, "\n\n"))
	}
	s, use := serve(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead.Close()
	m, err := New(Options{Domains: []string{"stop.sluice.test"}, CA: "https://" + dead.Addr().String() + "/dir", Storage: t.TempDir(),
		Log: slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	use(m)
	if err := m.Start(context.Background(), Challenges{TLSALPN: s.tls}); err != nil {
		t.Fatal(err)
	}
	if !wait.Until(wait.Timeout, func() bool { return strings.Contains(s.log.String(), "will retry") }) {
		t.Fatalf("the issuance did not fail and wait to retry:\n%s", s.log)
	}
	before := len(s.log.String())
	stopped := make(chan struct{})
	go func() {
		m.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return within 10 s")
	}
	var left []string
	if !wait.Until(wait.Timeout, func() bool { left = certmagicGoroutines(); return len(left) == 0 }) {
		t.Fatalf("certmagic goroutines %v after Stop:\n%s", wait.Timeout, strings.Join(left, "\n\n"))
	}
	if after := s.log.String()[before:]; strings.Contains(after, "level=ERROR") || strings.Contains(after, "level=WARN") {
		t.Errorf("Stop logged errors or warnings:\n%s", after)
	}
}

// With files beside it, a certificate that names the client's name exactly
// wins, then the Manager's for its domains, then a file's wildcard, then
// the files' default. A Manager that has no certificate yet refuses the
// handshake of its domain.
func TestSourceWithFiles(t *testing.T) {
	s, use := serve(t)
	ca := acmetest.Start(t, acmetest.Options{})
	m := s.manager(t, ca, t.TempDir(), "www.both.test", "exact.both.test")
	tca := tlstest.NewCA(t, "files CA")
	def, exact, wild := tca.Server(t, "default.test"), tca.Server(t, "exact.both.test"), tca.Server(t, "*.both.test")
	files, err := tlsterm.NewCertificates(def.TLS, exact.TLS, wild.TLS)
	if err != nil {
		t.Fatal(err)
	}
	use(m.Source(files))
	if chain, _, err := s.handshake("www.both.test", tca.Pool()); err != nil || !chain[0].Equal(wild.TLS.Leaf) {
		t.Errorf("before the Manager has a certificate: %v, want the file's wildcard", err)
	}
	if err := m.Start(context.Background(), Challenges{TLSALPN: s.tls}); err != nil {
		t.Fatal(err)
	}
	roots := ca.Roots(t)
	acmeLeaf := s.served(t, "www.both.test", roots)
	s.served(t, "exact.both.test", tca.Pool()) // the Manager's comes too, but the file's wins
	tests := []struct {
		sni  string
		want *x509.Certificate
	}{
		{"www.both.test", acmeLeaf},
		{"exact.both.test", exact.TLS.Leaf},
		{"other.both.test", wild.TLS.Leaf},
		{"nothing.test", def.TLS.Leaf},
		{"", def.TLS.Leaf},
	}
	for _, tt := range tests {
		nc, err := tls.Dial("tcp", s.tls.String(), &tls.Config{ServerName: tt.sni, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("SNI %q: %v", tt.sni, err)
		}
		got := nc.ConnectionState().PeerCertificates[0]
		nc.Close()
		if !got.Equal(tt.want) {
			t.Errorf("SNI %q: got the certificate for %v, want the one for %v", tt.sni, got.DNSNames, tt.want.DNSNames)
		}
	}
}

// New refuses what cannot work, and names it.
func TestNewChecks(t *testing.T) {
	tests := []struct {
		o    Options
		want string
	}{
		{Options{Storage: "x"}, "no domains"},
		{Options{Domains: []string{"*.example.com"}, Storage: "x"}, "only the DNS-01 challenge"},
		{Options{Domains: []string{"*.com"}, Storage: "x", DNS: dnsAt("ns.example.com")}, "top-level domain"},
		{Options{Domains: []string{"*.*.example.com"}, Storage: "x", DNS: dnsAt("ns.example.com")}, "one label, the first"},
		{Options{Domains: []string{"www.*.example.com"}, Storage: "x", DNS: dnsAt("ns.example.com")}, `'*' is not allowed`},
		{Options{Domains: []string{"*.bad_name.com"}, Storage: "x", DNS: dnsAt("ns.example.com")}, "not a wildcard of a domain name"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: dnsAt("")}, "dns: no server, and no exec hook"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: &DNS{Server: "ns:53", Exec: []string{"/bin/hook"}}}, "give one"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: &DNS{Exec: []string{""}}}, "exec: no program"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: &DNS{Exec: []string{"/bin/hook"}, KeyName: "k", Secret: "c2VjcmV0"}}, "sends no updates"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: &DNS{Server: "ns:53", KeyName: "k", Secret: "c2VjcmV0", KeyAlgorithm: "md5"}}, "key algorithm"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: &DNS{Server: "ns:53", KeyName: "k"}}, "has no secret"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: &DNS{Server: "ns:53", Secret: "c2VjcmV0"}}, "without a key name"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: &DNS{Server: "ns:53", KeyName: "k", Secret: "not base64!"}}, "not base64"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: &DNS{Server: "ns:53", Resolvers: []string{"1.1.1.1"}}}, `resolver "1.1.1.1" is not host:port`},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: &DNS{Server: "ns:53", OverrideDomain: "*.acme.example.net"}}, "override domain"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", DNS: &DNS{Server: "ns:53", OverrideDomain: "net"}}, "override domain"},
		{Options{Domains: []string{"10.0.0.1"}, Storage: "x"}, "IP address"},
		{Options{Domains: []string{"bad_name.example.com"}, Storage: "x"}, `'_' is not allowed`},
		{Options{Domains: []string{"-a.example.com"}, Storage: "x"}, "not a domain name"},
		{Options{Domains: []string{"a.example.com", "A.example.com."}, Storage: "x"}, "given twice"},
		{Options{Domains: []string{"a.example.com"}}, "no storage"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", CA: "http://ca.example.com/dir"}, "not an https:// URL"},
		{Options{Domains: []string{"a.example.com"}, Storage: "x", RenewalWindowRatio: 1}, "renewal window ratio"},
	}
	for _, tt := range tests {
		if _, err := New(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v): %v, want an error containing %q", tt.o, err, tt.want)
		}
	}
	m, err := New(Options{Domains: []string{"Www.Example.COM."}, Storage: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Domains(); len(d) != 1 || d[0] != "www.example.com" {
		t.Errorf("domains %v, want [www.example.com]", d)
	}
	if err := m.Start(context.Background(), Challenges{}); err == nil {
		t.Error("Start without a listener to answer a challenge: no error")
	}
	// With dns: wildcards, and the server's port and the key's algorithm
	// filled in.
	m, err = New(Options{Domains: []string{"*.Example.com", "example.com"}, Storage: "x", DNS: &DNS{Server: "ns.example.com", KeyName: "k", Secret: "c2VjcmV0"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Domains(); !slices.Equal(d, []string{"*.example.com", "example.com"}) {
		t.Errorf("domains %v", d)
	}
	if d := m.Options().DNS; d.Server != "ns.example.com:53" || d.KeyAlgorithm != "hmac-sha256" {
		t.Errorf("dns %+v, want the server on port 53 and hmac-sha256", d)
	}
}

// dnsAt is a DNS of the server at addr, unsigned.
func dnsAt(addr string) *DNS { return &DNS{Server: addr} }

// syncBuffer is a bytes.Buffer safe for a logger's writes and a test's
// reads at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The OCSP response of a certificate is stapled when its responder gives
// one; when the responder cannot be reached, the certificate is served
// without, and a warning says so.
func TestOCSPStapling(t *testing.T) {
	t.Run("responder answers", func(t *testing.T) {
		var mu sync.Mutex
		var issuer *x509.Certificate
		var key crypto.Signer
		responder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			req, err := ocsp.ParseRequest(body)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || issuer == nil {
				http.Error(w, "bad request", 400)
				return
			}
			resp, err := ocsp.CreateResponse(issuer, issuer, ocsp.Response{Status: ocsp.Good, SerialNumber: req.SerialNumber,
				ThisUpdate: time.Now().Add(-time.Minute), NextUpdate: time.Now().Add(time.Hour)}, key)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			w.Header().Set("Content-Type", "application/ocsp-response")
			w.Write(resp)
		}))
		t.Cleanup(responder.Close)
		s, use := serve(t)
		ca := acmetest.Start(t, acmetest.Options{OCSPResponder: responder.URL})
		mu.Lock()
		issuer, key = ca.Intermediate(t)
		mu.Unlock()
		m := s.manager(t, ca, t.TempDir(), "ocsp.sluice.test")
		use(m)
		if err := m.Start(context.Background(), Challenges{TLSALPN: s.tls}); err != nil {
			t.Fatal(err)
		}
		leaf := s.served(t, "ocsp.sluice.test", ca.Roots(t))
		_, staple, err := s.handshake("ocsp.sluice.test", ca.Roots(t))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := ocsp.ParseResponseForCert(staple, leaf, issuer)
		if err != nil || resp.Status != ocsp.Good {
			t.Errorf("stapled OCSP response %d bytes: %v (status %v), want a good one", len(staple), err, resp)
		}
	})
	t.Run("responder unreachable", func(t *testing.T) {
		dead, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead.Close()
		s, use := serve(t)
		ca := acmetest.Start(t, acmetest.Options{OCSPResponder: "http://" + dead.Addr().String() + "/"})
		m := s.manager(t, ca, t.TempDir(), "noocsp.sluice.test")
		use(m)
		if err := m.Start(context.Background(), Challenges{TLSALPN: s.tls}); err != nil {
			t.Fatal(err)
		}
		leaf := s.served(t, "noocsp.sluice.test", ca.Roots(t))
		if len(leaf.OCSPServer) == 0 {
			t.Fatal("the certificate names no OCSP responder")
		}
		if _, staple, _ := s.handshake("noocsp.sluice.test", ca.Roots(t)); len(staple) != 0 {
			t.Errorf("an OCSP response of %d bytes stapled", len(staple))
		}
		if !strings.Contains(s.log.String(), `level=WARN msg="stapling OCSP"`) {
			t.Errorf("no warning that the OCSP response could not be had:\n%s", s.log)
		}
	})
}

// CheckStorage takes a directory that can be written to, or made, and
// names what is wrong with one that cannot.
func TestCheckStorage(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{dir, filepath.Join(dir, "new", "acme")} {
		if err := CheckStorage(ok); err != nil {
			t.Errorf("CheckStorage(%s): %v", ok, err)
		}
	}
	for _, tt := range []struct{ dir, want string }{
		{file, "not a directory"},
		{filepath.Join(file, "acme"), "cannot be made: " + file + " is not a directory"},
	} {
		if err := CheckStorage(tt.dir); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckStorage(%s): %v, want %q", tt.dir, err, tt.want)
		}
	}
	if os.Geteuid() == 0 {
		return // root writes anywhere a mount allows
	}
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o500); err != nil {
		t.Fatal(err)
	}
	if err := CheckStorage(filepath.Join(ro, "acme")); err == nil || !strings.Contains(err.Error(), "cannot be written to") {
		t.Errorf("under a read-only directory: %v", err)
	}
}
