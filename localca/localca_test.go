package localca

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/proxytest"
)

// serveTLS serves handshakes with a's certificates on 127.0.0.1:0 until
// the test ends, and returns the address.
func serveTLS(t *testing.T, a *Authority) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	cfg := &tls.Config{GetCertificate: a.GetCertificate}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				tc := tls.Server(nc, cfg)
				if tc.Handshake() == nil {
					io.Copy(io.Discard, tc) // until the client closes
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// trust returns a pool holding the root certificate read from file, as a
// client told to trust that file has it.
func trust(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s holds no certificate", file)
	}
	return pool
}

// handshake connects to addr asking for name (none for an IP address, as
// clients do) and verifying against roots; it returns the certificate the
// server presented, and the verification's error.
func handshake(t *testing.T, addr, name string, roots *x509.CertPool) (*x509.Certificate, error) {
	t.Helper()
	var got *x509.Certificate
	cfg := &tls.Config{ServerName: name, RootCAs: roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			got = cs.PeerCertificates[0]
			return nil
		}}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err == nil {
		c.Close()
	} else if got == nil {
		// Verification failed before VerifyConnection: ask again
		// without it, for the certificate.
		insecure := &tls.Config{ServerName: name, InsecureSkipVerify: true}
		if c2, err2 := tls.Dial("tcp", addr, insecure); err2 == nil {
			got = c2.ConnectionState().PeerCertificates[0]
			c2.Close()
		}
	}
	return got, err
}

func newAuthority(t *testing.T, o Options) *Authority {
	t.Helper()
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A client that trusts the root file verifies the certificates for
// localhost, 127.0.0.1 and ::1 (no SNI), for a name listed and one a
// pattern covers; one for a name not listed gets the default
// certificate, which its verification refuses.
func TestAuthority(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	a := newAuthority(t, Options{Storage: dir, Names: []string{"App.Test.", "*.apps.test"}})
	created, err := a.Open()
	if err != nil || !created {
		t.Fatalf("Open: %v, created %v", err, created)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("storage: %v, mode %v; want 0700", err, fi.Mode().Perm())
	}
	if fi, err := os.Stat(filepath.Join(dir, "root.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("root.key: %v; want mode 0600", err)
	}
	roots := trust(t, a.RootFile())
	root := a.Root()
	if !root.IsCA || root.PublicKeyAlgorithm != x509.ECDSA || root.NotAfter.Sub(root.NotBefore) < 9*365*24*time.Hour {
		t.Fatalf("root: CA %v, %v, valid %v to %v", root.IsCA, root.PublicKeyAlgorithm, root.NotBefore, root.NotAfter)
	}
	addr := serveTLS(t, a)
	for _, name := range []string{"localhost", "127.0.0.1", "app.test", "APP.test", "x.apps.test", "a.b.apps.test"} {
		c, err := handshake(t, addr, name, roots)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if life := c.NotAfter.Sub(c.NotBefore); life > DefaultLifetime+2*time.Hour || life < DefaultLifetime {
			t.Errorf("%s: valid for %v, want 7 days", name, life)
		}
		if c.PublicKeyAlgorithm != x509.ECDSA || !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
			t.Errorf("%s: %v, %v", name, c.PublicKeyAlgorithm, c.ExtKeyUsage)
		}
	}
	for _, name := range []string{"other.test", "apps.test"} {
		c, err := handshake(t, addr, name, roots)
		var he x509.HostnameError
		if !errors.As(err, &he) || c == nil || !slices.Equal(c.DNSNames, []string{"localhost"}) {
			t.Errorf("%s: %v, certificate for %v; want the default one, refused for the name", name, err, c.DNSNames)
		}
	}
	// What it issued is stored, one file per name.
	entries, err := os.ReadDir(filepath.Join(dir, "leaves"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	if want := []string{"a.b.apps.test.pem", "app.test.pem", "localhost.pem", "x.apps.test.pem"}; !slices.Equal(files, want) {
		t.Errorf("stored %v, want %v", files, want)
	}
}

// The certificate for a client that asks for no name is for the address
// it reached: the default one on a loopback address, else one for the
// address when it is listed.
func TestAuthorityNoSNI(t *testing.T) {
	a := newAuthority(t, Options{Storage: t.TempDir(), Names: []string{"192.0.2.7"}})
	if _, err := a.Open(); err != nil {
		t.Fatal(err)
	}
	local := func(ip string) *tls.ClientHelloInfo {
		c1, c2 := net.Pipe()
		t.Cleanup(func() { c1.Close(); c2.Close() })
		return &tls.ClientHelloInfo{Conn: addrConn{c1, &net.TCPAddr{IP: net.ParseIP(ip), Port: 443}}}
	}
	for _, tt := range []struct {
		ip   string
		want string
	}{
		{"127.0.0.1", "localhost"}, {"::1", "localhost"}, {"192.0.2.7", "192.0.2.7"}, {"192.0.2.8", "localhost"},
	} {
		c, err := a.GetCertificate(local(tt.ip))
		if err != nil {
			t.Fatal(err)
		}
		if got := leafName(c.Leaf); got != tt.want {
			t.Errorf("no SNI on %s: a certificate for %s, want %s", tt.ip, got, tt.want)
		}
	}
}

type addrConn struct {
	net.Conn
	local net.Addr
}

func (c addrConn) LocalAddr() net.Addr { return c.local }

// A second Authority on the same storage (a restart, a reload) has the
// same root, and serves the leaves stored instead of issuing them again.
func TestAuthorityReopen(t *testing.T) {
	dir := t.TempDir()
	a := newAuthority(t, Options{Storage: dir, Names: []string{"app.test"}})
	if _, err := a.Open(); err != nil {
		t.Fatal(err)
	}
	rootPEM, _ := os.ReadFile(a.RootFile())
	first, err := handshake(t, serveTLS(t, a), "app.test", trust(t, a.RootFile()))
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	b := newAuthority(t, Options{Storage: dir, Names: []string{"app.test"}, Log: slog.New(slog.NewTextHandler(&log, nil))})
	created, err := b.Open()
	if err != nil || created {
		t.Fatalf("second Open: %v, created %v; want the root stored", err, created)
	}
	if again, _ := os.ReadFile(b.RootFile()); !bytes.Equal(again, rootPEM) {
		t.Fatal("the root file changed")
	}
	if !b.Root().Equal(a.Root()) {
		t.Fatal("another root")
	}
	second, err := handshake(t, serveTLS(t, b), "app.test", trust(t, a.RootFile()))
	if err != nil {
		t.Fatal(err)
	}
	if first.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Errorf("app.test issued again (serial %v, then %v); want the stored one", first.SerialNumber, second.SerialNumber)
	}
	for _, want := range []string{"msg=\"local CA\"", "root=" + filepath.Join(dir, "root.crt"), "created=false", "trust=\"curl --cacert " + filepath.Join(dir, "root.crt")} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log does not say %s:\n%s", want, log.String())
		}
	}
	if strings.Contains(log.String(), "issued") {
		t.Errorf("issued again:\n%s", log.String())
	}
}

// However many names clients ask for, an Authority that issues for any
// name holds at most MaxCertificates leaves, in memory and on disk; the
// names past it get the default certificate.
func TestAuthorityMaxCertificates(t *testing.T) {
	dir := t.TempDir()
	var log proxytest.Buffer
	a := newAuthority(t, Options{Storage: dir, AnyName: true, MaxCertificates: 3, Log: slog.New(slog.NewTextHandler(&log, nil))})
	if _, err := a.Open(); err != nil {
		t.Fatal(err)
	}
	addr, roots := serveTLS(t, a), trust(t, a.RootFile())
	for i, name := range []string{"a.test", "b.test", "c.test", "d.test", "a.test", "e.test"} {
		c, err := handshake(t, addr, name, roots)
		own := i < 2 || name == "a.test"
		if own && err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !own && (err == nil || c == nil || leafName(c) != "localhost") {
			t.Errorf("%s: %v, %v; want the default certificate past the bound", name, err, c)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "leaves"))
	if len(entries) != 3 {
		t.Errorf("%d files stored, want 3", len(entries))
	}
	if n := strings.Count(log.String(), "max_certificates (3)"); n != 1 {
		t.Errorf("%d lines about the bound, want 1 (at most one a minute):\n%s", n, log.String())
	}

	// Reopened with a lower bound, it keeps the default leaf and the
	// first by name, and removes the rest.
	b := newAuthority(t, Options{Storage: dir, AnyName: true, MaxCertificates: 2})
	if _, err := b.Open(); err != nil {
		t.Fatal(err)
	}
	var files []string
	entries, _ = os.ReadDir(filepath.Join(dir, "leaves"))
	for _, e := range entries {
		files = append(files, e.Name())
	}
	if want := []string{"a.test.pem", "localhost.pem"}; !slices.Equal(files, want) {
		t.Errorf("stored %v, want %v", files, want)
	}
}

// A leaf is issued again once two thirds of its life have passed, not
// before; a stored leaf that expired, or that the root did not issue, or
// for a name no longer allowed, is removed at Open.
func TestAuthorityRenew(t *testing.T) {
	dir := t.TempDir()
	var now atomic.Pointer[time.Time]
	t0 := time.Now()
	now.Store(&t0)
	clock := func() time.Time { return *now.Load() }
	var log proxytest.Buffer
	a := newAuthority(t, Options{Storage: dir, AnyName: true, Now: clock, Log: slog.New(slog.NewTextHandler(&log, nil))})
	if _, err := a.Open(); err != nil {
		t.Fatal(err)
	}
	hello := &tls.ClientHelloInfo{ServerName: "app.test"}
	first, err := a.GetCertificate(hello)
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) *x509.Certificate {
		t.Helper()
		tn := t0.Add(d)
		now.Store(&tn)
		c, err := a.GetCertificate(hello)
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf
	}
	if c := at(4 * 24 * time.Hour); c.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
		t.Fatal("renewed after 4 of 7 days")
	}
	renewed := at(5 * 24 * time.Hour)
	if renewed.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatal("not renewed after 5 of 7 days")
	}
	if !renewed.NotAfter.After(first.Leaf.NotAfter) || !strings.Contains(log.String(), `msg="local CA: certificate renewed" name=app.test`) {
		t.Fatalf("renewed until %v (was %v); log:\n%s", renewed.NotAfter, first.Leaf.NotAfter, log.String())
	}

	// Much later: the stored app.test leaf has expired, and a leaf of
	// another root, and one for a name no longer allowed, lie there.
	other := newAuthority(t, Options{Storage: t.TempDir(), AnyName: true})
	if _, err := other.Open(); err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.GetCertificate(&tls.ClientHelloInfo{ServerName: "foreign.test"})
	if err := other.store("foreign.test", foreign); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(other.opts.Storage, "leaves", "foreign.test.pem"))
	os.WriteFile(filepath.Join(dir, "leaves", "foreign.test.pem"), b, 0o600)
	later := t0.Add(30 * 24 * time.Hour)
	c := newAuthority(t, Options{Storage: dir, Names: []string{"app.test", "foreign.test"}, Now: func() time.Time { return later }})
	a.GetCertificate(&tls.ClientHelloInfo{ServerName: "gone.test"}) // stored by a, which allows any name
	if _, err := c.Open(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "leaves"))
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	if want := []string{"localhost.pem"}; !slices.Equal(files, want) {
		t.Errorf("stored after Open %v, want %v (expired, foreign and disallowed removed; the default issued again)", files, want)
	}
}

// Many handshakes at once for a name not yet issued get one certificate.
func TestAuthorityConcurrent(t *testing.T) {
	var log proxytest.Buffer
	a := newAuthority(t, Options{Storage: t.TempDir(), AnyName: true, Log: slog.New(slog.NewTextHandler(&log, nil))})
	if _, err := a.Open(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	serials := make([]string, 16)
	for i := range serials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := a.GetCertificate(&tls.ClientHelloInfo{ServerName: "app.test"})
			if err != nil {
				t.Error(err)
				return
			}
			serials[i] = c.Leaf.SerialNumber.String()
		}()
	}
	wg.Wait()
	if distinct := slices.Compact(slices.Clone(serials)); strings.Count(log.String(), "certificate issued") != 1 || len(distinct) != 1 {
		t.Errorf("serials %v; log:\n%s", serials, log.String())
	}
}

// Open refuses a storage whose root cannot be used, and says what to do;
// Check says the same without changing anything.
func TestAuthorityBadRoot(t *testing.T) {
	good := t.TempDir()
	a := newAuthority(t, Options{Storage: good})
	if _, err := a.Open(); err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := os.ReadFile(filepath.Join(good, "root.key"))
	certPEM, _ := os.ReadFile(a.RootFile())
	leafPEM, _ := os.ReadFile(filepath.Join(good, "leaves", "localhost.pem"))
	for _, tt := range []struct {
		name       string
		cert, key  []byte
		want       string
		noCertFile bool
	}{
		{"key alone", nil, keyPEM, "root.key is there without root.crt", true},
		{"cert alone", certPEM, nil, "root.crt is there without root.key", false},
		{"not a CA", leafPEM, leafPEM, "is not a CA certificate", false},
		{"garbage", []byte("x"), keyPEM, "no PEM CERTIFICATE block", false},
	} {
		dir := t.TempDir()
		if tt.cert != nil {
			os.WriteFile(filepath.Join(dir, "root.crt"), tt.cert, 0o644)
		}
		if tt.key != nil {
			os.WriteFile(filepath.Join(dir, "root.key"), tt.key, 0o600)
		}
		err := Check(dir)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Check: %v, want %q", tt.name, err, tt.want)
		}
		if _, err := newAuthority(t, Options{Storage: dir}).Open(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Open: %v, want %q", tt.name, err, tt.want)
		}
	}
	if err := Check(filepath.Join(t.TempDir(), "none")); err != nil {
		t.Errorf("Check of a storage not made yet: %v", err)
	}
}

func TestNew(t *testing.T) {
	for _, tt := range []struct {
		o    Options
		want string
	}{
		{Options{}, "no storage directory"},
		{Options{Storage: "x", MaxCertificates: -1}, "MaxCertificates -1"},
		{Options{Storage: "x", Names: []string{"bad name"}}, "bad name is not a domain name"},
		{Options{Storage: "x", Lifetime: time.Second}, "lifetime 1s"},
	} {
		if _, err := New(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v): %v, want %q", tt.o, err, tt.want)
		}
	}
	a := newAuthority(t, Options{Storage: "x"})
	if _, err := a.GetCertificate(&tls.ClientHelloInfo{ServerName: "localhost"}); err == nil {
		t.Error("GetCertificate before Open: no error")
	}
}

func TestCheckName(t *testing.T) {
	for _, tt := range []struct {
		in, want, err string
	}{
		{"localhost", "localhost", ""},
		{"App.Test.", "app.test", ""},
		{"*.Apps.test", "*.apps.test", ""},
		{"*.test", "*.test", ""},
		{"xn--bcher-kva.test", "xn--bcher-kva.test", ""},
		{"127.0.0.1", "127.0.0.1", ""},
		{"::1", "::1", ""},
		{"::ffff:10.0.0.1", "10.0.0.1", ""},
		{"fe80::1%eth0", "", "zone"},
		{"", "", "not a domain name"},
		{"*", "", "not a domain name"},
		{"a.*.test", "", "not allowed"},
		{"*.*.test", "", "not a pattern"},
		{"-a.test", "", "not starting or ending"},
		{"a..test", "", "each label"},
		{"bücher.test", "", "xn--"},
		{"a_b.test", "", "not allowed"},
		{strings.Repeat("a", 64) + ".test", "", "1 to 63"},
		{strings.Repeat("abcdefg.", 32) + "test", "", "longer than a domain name"},
	} {
		got, err := CheckName(tt.in)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("CheckName(%q) = %q, %v; want %q, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
}

// FuzzCheckName: a name CheckName accepts is accepted again as it
// returned it, and one the policy of it allows is a name clientName
// gives.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"localhost", "*.app.test", "127.0.0.1", "::1", "A.B.", "a..b", "*.*", "x%y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := CheckName(s)
		if err != nil {
			return
		}
		again, err := CheckName(n)
		if err != nil || again != n {
			t.Fatalf("CheckName(%q) = %q, then %q, %v", s, n, again, err)
		}
		p, err := newPolicy([]string{n}, false)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(n, "*.") && !p.allows(clientName(n)) {
			t.Fatalf("the policy of %q does not allow it", n)
		}
	})
}

func TestDefaultStorage(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	home := func() (string, error) { return "/home/u", nil }
	noHome := func() (string, error) { return "", errors.New("$HOME is not defined") }
	for _, tt := range []struct {
		goos string
		env  func(string) string
		euid int
		home func() (string, error)
		want string
	}{
		{"linux", env("STATE_DIRECTORY", "/var/lib/sluice:/var/lib/other"), 61234, noHome, "/var/lib/sluice/pki"},
		{"linux", env(), 0, home, "/var/lib/sluice/pki"},
		{"linux", env(), 1000, home, "/home/u/.local/share/sluice/pki"},
		{"linux", env("XDG_DATA_HOME", "/data"), 1000, home, "/data/sluice/pki"},
		{"linux", env("XDG_DATA_HOME", "relative"), 1000, home, "/home/u/.local/share/sluice/pki"},
		{"linux", env(), 1000, noHome, "/var/lib/sluice/pki"},
		{"darwin", env(), 501, home, "/home/u/Library/Application Support/sluice/pki"},
	} {
		if got := defaultStorage(tt.goos, tt.env, tt.euid, tt.home); got != tt.want {
			t.Errorf("%s euid %d: %s, want %s", tt.goos, tt.euid, got, tt.want)
		}
	}
}
