// Package acmetest runs an ACME CA on 127.0.0.1 for tests: Let's
// Encrypt's pebble, the module tool (go tool pebble), with a DNS server of
// its own that answers 127.0.0.1 for every name, so that pebble's
// validation of a challenge (HTTP-01 or TLS-ALPN-01) reaches the server
// under test on the ports it was given. Pebble's own TLS certificate is
// made at test time by internal/tlstest.
package acmetest

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sluice-proxy/sluice/internal/gotool"
	"github.com/sluice-proxy/sluice/internal/tlstest"
)

// Options say how a CA issues and validates.
type Options struct {
	// HTTPPort and TLSPort are the ports on 127.0.0.1 where pebble
	// validates HTTP-01 and TLS-ALPN-01 challenges. With both 0, every
	// challenge passes unvalidated (PEBBLE_VA_ALWAYS_VALID).
	HTTPPort, TLSPort int
	// Validity is how long the certificates issued are valid for, whole
	// seconds; 0 means pebble's default (90 days).
	Validity time.Duration
	// OCSPResponder is the OCSP responder URL the certificates name; ""
	// names none.
	OCSPResponder string
	// Zone, when set, makes the DNS server pebble asks authoritative for
	// that zone ("example.test"), as DNS-01 needs: it answers the zone's
	// SOA and the TXT records that RFC 2136 updates signed with the TSIG
	// key TSIGName (hmac-sha256, secret TSIGSecret, base64) add; it
	// refuses other updates. Pebble then validates DNS-01 challenges.
	Zone                 string
	TSIGName, TSIGSecret string
	// CNAMEs are names the DNS server answers with a CNAME to another:
	// the records of a challenge delegated to Zone.
	CNAMEs map[string]string
	// TXTDir, when set, holds TXT records the DNS server answers too, as
	// a hook program would write them: a file per name (lower case, no
	// final dot), a value per line.
	TXTDir string
}

// CA is a running pebble.
type CA struct {
	// Directory is the ACME directory URL.
	Directory string
	// TLSRootFile is a PEM file of the CA that signed pebble's own TLS
	// certificate: what an ACME client must trust to talk to it.
	TLSRootFile string
	// TLSRoots holds the same CA.
	TLSRoots *x509.CertPool

	// DNS is the host:port (TCP and UDP) of the DNS server pebble asks.
	DNS string

	mgmt   string // host:port of pebble's management interface
	client *http.Client
	out    *syncBuffer
	zone   *zone
}

// Start runs pebble until the test ends. It fails the test when pebble
// cannot be built or does not come up.
func Start(t testing.TB, o Options) *CA {
	t.Helper()
	bin := gotool.Binary(t, "pebble")
	dir := t.TempDir()
	tlsCA := tlstest.NewCA(t, "pebble TLS CA")
	certFile, keyFile := tlsCA.Server(t, "127.0.0.1", "localhost").Write(t, dir, "pebble")
	rootFile := filepath.Join(dir, "pebble-tls-ca.pem")
	tlstest.WriteFile(t, rootFile, tlsCA.PEM)
	z := &zone{name: dns.Fqdn(o.Zone), txt: map[string][]string{}, cname: map[string]string{}, txtDir: o.TXTDir}
	for from, to := range o.CNAMEs {
		z.cname[strings.ToLower(dns.Fqdn(from))] = strings.ToLower(dns.Fqdn(to))
	}
	if o.TSIGName != "" {
		z.key = dns.Fqdn(o.TSIGName)
	}
	resolver := startDNS(t, z, o.TSIGSecret)

	env := append(os.Environ(),
		"PEBBLE_VA_NOSLEEP=1",      // no random sleep before validating
		"PEBBLE_WFE_NONCEREJECT=0", // no badNonce for valid nonces
		"PEBBLE_AUTHZREUSE=0",      // every order validates afresh
	)
	if o.HTTPPort == 0 && o.TLSPort == 0 && o.Zone == "" {
		env = append(env, "PEBBLE_VA_ALWAYS_VALID=1")
	}
	ca := &CA{TLSRootFile: rootFile, TLSRoots: tlsCA.Pool(), DNS: resolver, out: &syncBuffer{}, zone: z}
	ca.client = &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.TLSRoots}}}
	t.Cleanup(ca.client.CloseIdleConnections)

	// Pebble takes the addresses it listens on from its config file, so
	// free ports are found first; one taken meanwhile makes pebble exit,
	// and another pair is tried.
	for attempt := 0; ; attempt++ {
		listen, mgmt := freePort(t), freePort(t)
		config := map[string]any{"pebble": map[string]any{
			"listenAddress":           listen,
			"managementListenAddress": mgmt,
			"certificate":             certFile,
			"privateKey":              keyFile,
			"httpPort":                o.HTTPPort,
			"tlsPort":                 o.TLSPort,
			"ocspResponderURL":        o.OCSPResponder,
			"profiles": map[string]any{"default": map[string]any{
				"description":    "acmetest",
				"validityPeriod": int64(o.Validity / time.Second),
			}},
		}}
		data, err := json.Marshal(config)
		if err != nil {
			t.Fatal(err)
		}
		configFile := filepath.Join(dir, "pebble.json")
		tlstest.WriteFile(t, configFile, data)
		cmd := exec.Command(bin, "-config", configFile, "-dnsserver", resolver)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = ca.out, ca.out
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting pebble: %v", err)
		}
		exited := make(chan struct{})
		go func() {
			cmd.Wait()
			close(exited)
		}()
		ca.Directory = "https://" + listen + "/dir"
		ca.mgmt = mgmt
		if ca.ready(exited) {
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
				if t.Failed() {
					t.Logf("pebble's output:\n%s", ca.out)
				}
			})
			return ca
		}
		cmd.Process.Kill()
		<-exited
		if attempt == 2 {
			t.Fatalf("pebble did not come up:\n%s", ca.out)
		}
	}
}

// ready waits for pebble to serve its directory and its management
// interface; false when it exits first or takes more than 20 s.
func (ca *CA) ready(exited <-chan struct{}) bool {
	deadline := time.Now().Add(20 * time.Second)
	for _, url := range []string{ca.Directory, "https://" + ca.mgmt + "/roots/0"} {
		for {
			resp, err := ca.client.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			select {
			case <-exited:
				return false
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return false
			}
		}
	}
	return true
}

// Roots returns a pool of the root that pebble's certificates chain to
// (made anew each time pebble starts), to verify what a server serves.
func (ca *CA) Roots(t testing.TB) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.get(t, "/roots/0")) {
		t.Fatal("pebble's root is not a PEM certificate")
	}
	return pool
}

// Intermediate returns the certificate that signs pebble's leaves, and its
// key, to sign what it would (OCSP responses, in a test's responder).
func (ca *CA) Intermediate(t testing.TB) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	block, _ := pem.Decode(ca.get(t, "/intermediates/0"))
	if block == nil {
		t.Fatal("pebble's intermediate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	block, _ = pem.Decode(ca.get(t, "/intermediate-keys/0"))
	if block == nil {
		t.Fatal("pebble's intermediate key is not PEM")
	}
	var key any
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		t.Fatalf("pebble's intermediate key (%s): %v", block.Type, err)
	}
	return cert, key.(crypto.Signer)
}

func (ca *CA) get(t testing.TB, path string) []byte {
	t.Helper()
	resp, err := ca.client.Get("https://" + ca.mgmt + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("pebble %s: %d %v", path, resp.StatusCode, err)
	}
	return body
}

// Output returns what pebble has written so far.
func (ca *CA) Output() string { return ca.out.String() }

// Orders counts the orders pebble has finalized (certificates issued), as
// its log tells them.
func (ca *CA) Orders() int { return strings.Count(ca.out.String(), "Issued certificate serial ") }

// freePort returns a 127.0.0.1 address with a port that was free a moment
// ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer is a bytes.Buffer safe for a process's output and a test's
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
