package tlsterm

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
)

// handshake serves one handshake with cfg on 127.0.0.1 and returns what
// the client, configured by client, saw: the connection state, or the
// error.
func handshake(t *testing.T, cfg *tls.Config, client *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(nc, cfg)
		if tc.Handshake() == nil {
			tc.Write([]byte{'!'})
			tc.Read(make([]byte, 1)) // until the client closes
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(nc, client)
	if err = tc.Handshake(); err == nil {
		// A TLS 1.3 session ticket comes after the handshake: the read
		// takes it in.
		_, err = tc.Read(make([]byte, 1))
	}
	return tc.ConnectionState(), err
}

func TestCertificatesBySNI(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	def := ca.Server(t, "default.test")
	exact := ca.Server(t, "www.example.com", "example.com")
	wild := ca.Server(t, "*.example.com")
	deeper := ca.Server(t, "*.api.example.com")
	ecdsa := ca.Server(t, "dual.test")
	rsa := ca.ServerRSA(t, "dual.test")
	cs, err := NewCertificates(def.TLS, exact.TLS, wild.TLS, deeper.TLS, ecdsa.TLS, rsa.TLS)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := NewSwitch(Settings{Certificates: cs})
	if err != nil {
		t.Fatal(err)
	}
	rsaOnly := []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}
	tests := []struct {
		name, sni string
		want      *tlstest.Leaf
		rsaOnly   bool // a TLS 1.2 client that takes RSA certificates only
	}{
		{"exact", "www.example.com", exact, false},
		{"exact, another name of the same certificate", "example.com", exact, false},
		{"exact, any case, trailing dot", "WWW.Example.COM.", exact, false},
		{"wildcard", "shop.example.com", wild, false},
		{"wildcard covers one label only: the deeper wildcard", "v1.api.example.com", deeper, false},
		{"two labels under a one-label wildcard: the default", "a.b.example.com", def, false},
		{"the wildcard's own name is not covered: the default", "api.example.com", wild, false},
		{"unknown name: the default", "other.test", def, false},
		{"no SNI: the default", "", def, false},
		{"two certificates for a name: the first the client takes", "dual.test", ecdsa, false},
		{"two certificates for a name: RSA for a client without ECDSA", "dual.test", rsa, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := &tls.Config{ServerName: tt.sni, InsecureSkipVerify: true}
			if tt.rsaOnly {
				client.MaxVersion, client.CipherSuites = tls.VersionTLS12, rsaOnly
			}
			st, err := handshake(t, sw.Config(), client)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.PeerCertificates[0]; got.SerialNumber.Cmp(tt.want.Serial()) != 0 {
				t.Errorf("SNI %q: got the certificate for %v, want the one for %v", tt.sni, got.DNSNames, tt.want.TLS.Leaf.DNSNames)
			}
		})
	}
}

// "*.api.example.com" names api.example.com's subdomains: a client asking
// for api.example.com itself gets the one-label wildcard of example.com.
func TestWildcardOfParent(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	def := ca.Server(t, "default.test")
	wild := ca.Server(t, "*.example.com")
	cs, err := NewCertificates(def.TLS, wild.TLS)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := cs.GetCertificate(&tls.ClientHelloInfo{ServerName: "api.example.com"})
	if got != cs.List()[1] {
		t.Errorf("api.example.com got %v", got.Leaf.DNSNames)
	}
}

func TestNewCertificatesRefusesNone(t *testing.T) {
	if _, err := NewCertificates(); err == nil {
		t.Error("no certificates accepted")
	}
	if _, err := NewSwitch(Settings{}); err == nil {
		t.Error("a Switch without certificates accepted")
	}
}

func TestLoadPair(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	leaf := ca.Server(t, "example.com")
	other := ca.Server(t, "other.com")
	dir := t.TempDir()
	cert, key := leaf.Write(t, dir, "site")
	_, otherKey := other.Write(t, dir, "other")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	garbage := write("garbage.pem", "not PEM at all\n")
	badDER := write("bad-der.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	encrypted := write("enc.key", "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n")
	missing := filepath.Join(dir, "missing.pem")

	good, err := LoadPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if good.Leaf == nil || good.Leaf.SerialNumber.Cmp(leaf.Serial()) != 0 || len(good.Certificate) != 1 {
		t.Fatalf("loaded %+v", good)
	}

	tests := []struct {
		name, cert, key string
		file            string // the file the error names
		isKey           bool
		why             string
	}{
		{"missing certificate", missing, key, missing, false, "no such file"},
		{"missing key", cert, missing, missing, true, "no such file"},
		{"a directory", dir, key, dir, false, "is a directory"},
		{"not PEM", garbage, key, garbage, false, "no PEM CERTIFICATE block"},
		{"certificate that does not parse", badDER, key, badDER, false, "certificate 1:"},
		{"swapped", key, cert, key, false, "holds a private key, not a certificate"},
		{"key is a certificate", cert, cert, cert, true, "holds a certificate, not a private key"},
		{"key not PEM", cert, garbage, garbage, true, "no PEM private key block"},
		{"encrypted key", cert, encrypted, encrypted, true, "encrypted key"},
		{"another certificate's key", cert, otherKey, otherKey, true, "not the private key of the certificate in " + cert},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadPair(tt.cert, tt.key)
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v (%T), want a *FileError", err, err)
			}
			if fe.Path != tt.file || fe.Key != tt.isKey || !strings.Contains(err.Error(), tt.why) ||
				!strings.HasPrefix(err.Error(), tt.file+": ") {
				t.Errorf("got %q (path %s, key %v); want it to name %s (key %v) and say %q", err, fe.Path, fe.Key, tt.file, tt.isKey, tt.why)
			}
			if strings.Count(err.Error(), tt.file) > 1 && tt.name != "another certificate's key" {
				t.Errorf("%q names the file twice", err)
			}
		})
	}
	if _, err := LoadPair(missing, key); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v does not match fs.ErrNotExist", err)
	}
}

func TestLoadCAs(t *testing.T) {
	ca := tlstest.NewCA(t, "clients CA")
	dir := t.TempDir()
	path := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, path, ca.PEM)
	pool, err := LoadCAs(path)
	if err != nil {
		t.Fatal(err)
	}
	client := ca.Client(t, "alice")
	if _, err := client.TLS.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("a client certificate of the CA does not verify against the pool: %v", err)
	}
	empty := filepath.Join(dir, "empty.pem")
	tlstest.WriteFile(t, empty, nil)
	if _, err := LoadCAs(empty); err == nil || !strings.HasPrefix(err.Error(), empty+": ") {
		t.Errorf("an empty CA file: %v", err)
	}
}

// Set changes the certificate of the handshakes that follow, and a session
// ticket issued before it still resumes after it.
func TestSwitchSetKeepsSessions(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	old, renewed := ca.Server(t, "example.com"), ca.Server(t, "example.com")
	certs := func(l *tlstest.Leaf) *Certificates {
		cs, err := NewCertificates(l.TLS)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	sw, err := NewSwitch(Settings{Certificates: certs(old)})
	if err != nil {
		t.Fatal(err)
	}
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		if err := sw.Set(Settings{Certificates: certs(old)}); err != nil {
			t.Fatal(err)
		}
		cache := tls.NewLRUClientSessionCache(4)
		client := &tls.Config{ServerName: "example.com", RootCAs: ca.Pool(), ClientSessionCache: cache, MaxVersion: version}
		st, err := handshake(t, sw.Config(), client)
		if err != nil || st.DidResume || st.PeerCertificates[0].SerialNumber.Cmp(old.Serial()) != 0 {
			t.Fatalf("TLS %x, first handshake: resumed %v, err %v", version, st.DidResume, err)
		}
		if err := sw.Set(Settings{Certificates: certs(renewed)}); err != nil {
			t.Fatal(err)
		}
		if st, err := handshake(t, sw.Config(), client); err != nil || !st.DidResume {
			t.Errorf("TLS %x, after Set: resumed %v, err %v; want the session resumed", version, st.DidResume, err)
		}
		fresh := &tls.Config{ServerName: "example.com", RootCAs: ca.Pool(), MaxVersion: version}
		if st, err := handshake(t, sw.Config(), fresh); err != nil || st.PeerCertificates[0].SerialNumber.Cmp(renewed.Serial()) != 0 {
			t.Errorf("TLS %x, a new client after Set did not get the renewed certificate (err %v)", version, err)
		}
	}
}

func TestSettingsChecked(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	cs, _ := NewCertificates(ca.Server(t, "a.test").TLS)
	if _, err := NewSwitch(Settings{Certificates: cs, ClientAuth: tls.RequireAndVerifyClientCert}); err == nil {
		t.Error("client certificates required without CAs: accepted")
	}
	sw, err := NewSwitch(Settings{Certificates: cs, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, sw.Config(), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}); err == nil {
		t.Error("a TLS 1.2 client was served with min_version 1.3")
	}
	if sw.Set(Settings{}) == nil {
		t.Error("Set without certificates accepted")
	}
	if _, err := handshake(t, sw.Config(), &tls.Config{InsecureSkipVerify: true}); err != nil {
		t.Errorf("after a refused Set: %v", err)
	}
}

// Lookup tells a name held exactly from one held by a wildcard, and gives
// nothing where GetCertificate falls back on the default.
func TestLookup(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	def := ca.Server(t, "default.test")
	exact := ca.Server(t, "www.example.com")
	wild := ca.Server(t, "*.example.com")
	cs, err := NewCertificates(def.TLS, exact.TLS, wild.TLS)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		sni   string
		want  *tlstest.Leaf
		exact bool
	}{
		{"www.example.com", exact, true},
		{"default.test", def, true},
		{"api.example.com", wild, false},
		{"example.com", nil, false},
		{"", nil, false},
	}
	for _, tt := range tests {
		c, isExact := cs.Lookup(&tls.ClientHelloInfo{ServerName: tt.sni})
		switch {
		case tt.want == nil && c != nil:
			t.Errorf("SNI %q: got %v, want none", tt.sni, c.Leaf.DNSNames)
		case tt.want != nil && (c == nil || c.Leaf.SerialNumber.Cmp(tt.want.Serial()) != 0 || isExact != tt.exact):
			t.Errorf("SNI %q: got %v (exact %v), want %v (exact %v)", tt.sni, c, isExact, tt.want.TLS.Leaf.DNSNames, tt.exact)
		}
	}
}

// sourceFunc is a Source made of a function.
type sourceFunc func(*tls.ClientHelloInfo) (*tls.Certificate, error)

func (f sourceFunc) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f(hello)
}

// With acme-tls/1 among the protocols, an ACME CA's validation handshake
// gets acme-tls/1 and the Source's answer for it, and no request for a
// client certificate, on a listener that requires one from its clients;
// other clients are served as before. Without acme-tls/1, such a
// handshake is refused.
func TestSwitchACMEChallenge(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	site := ca.Server(t, "example.com")
	challenge := ca.Server(t, "example.com") // stands for the challenge's certificate
	src := sourceFunc(func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if ChallengeHello(hello) {
			return challenge.TLS, nil
		}
		return site.TLS, nil
	})
	clients := tlstest.NewCA(t, "clients")
	settings := Settings{Certificates: src, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients.Pool(),
		NextProtos: []string{"http/1.1", ACMETLS1}}
	sw, err := NewSwitch(settings)
	if err != nil {
		t.Fatal(err)
	}
	validator := &tls.Config{ServerName: "example.com", InsecureSkipVerify: true, NextProtos: []string{ACMETLS1}}
	st, err := handshake(t, sw.Config(), validator)
	if err != nil {
		t.Fatalf("validation handshake: %v", err)
	}
	if st.NegotiatedProtocol != ACMETLS1 || st.PeerCertificates[0].SerialNumber.Cmp(challenge.Serial()) != 0 {
		t.Errorf("validation handshake: protocol %q, serial %v; want %q and the challenge's certificate",
			st.NegotiatedProtocol, st.PeerCertificates[0].SerialNumber, ACMETLS1)
	}

	// A client that offers acme-tls/1 beside other protocols is a client.
	withCert := func(protos ...string) *tls.Config {
		return &tls.Config{ServerName: "example.com", RootCAs: ca.Pool(), NextProtos: protos,
			Certificates: []tls.Certificate{*clients.Client(t, "c").TLS}}
	}
	st, err = handshake(t, sw.Config(), withCert("h2", "http/1.1", ACMETLS1))
	if err != nil || st.NegotiatedProtocol != "http/1.1" || st.PeerCertificates[0].SerialNumber.Cmp(site.Serial()) != 0 {
		t.Errorf("client offering h2, http/1.1 and acme-tls/1: protocol %q, err %v; want http/1.1 and the site's certificate", st.NegotiatedProtocol, err)
	}
	noCert := &tls.Config{ServerName: "example.com", RootCAs: ca.Pool(), NextProtos: []string{"http/1.1", ACMETLS1}}
	if _, err := handshake(t, sw.Config(), noCert); err == nil {
		t.Error("a client without a certificate was served on a listener that requires one")
	}

	settings.NextProtos = []string{"http/1.1"}
	if err := sw.Set(settings); err != nil {
		t.Fatal(err)
	}
	if st, err := handshake(t, sw.Config(), validator); err == nil {
		t.Errorf("without acme-tls/1 offered, a validation handshake completed (protocol %q)", st.NegotiatedProtocol)
	}
}

// The ticket keys rotate as crypto/tls's own: a new key every 24 hours,
// first (it makes the tickets), each kept 7 days.
func TestTicketKeyRotation(t *testing.T) {
	var tk tickets
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	first, g1 := tk.current(start)
	if len(first) != 1 {
		t.Fatalf("%d keys at start, want 1", len(first))
	}
	steps := []struct {
		after    time.Duration
		wantKeys int
		rotated  bool
	}{
		{time.Hour, 1, false},
		{23*time.Hour + 59*time.Minute, 1, false},
		{24 * time.Hour, 2, true},
		{6 * 24 * time.Hour, 3, true},
		{7 * 24 * time.Hour, 3, true}, // the first key, 7 days old, is gone
		{7*24*time.Hour + time.Hour, 3, false},
	}
	gen := g1
	prev := first
	for _, s := range steps {
		keys, g := tk.current(start.Add(s.after))
		if len(keys) != s.wantKeys {
			t.Errorf("after %v: %d keys, want %d", s.after, len(keys), s.wantKeys)
		}
		if rotated := g != gen; rotated != s.rotated {
			t.Errorf("after %v: rotated %v, want %v", s.after, rotated, s.rotated)
		}
		if s.rotated && (keys[0] == prev[0] || keys[1] != prev[0]) {
			t.Errorf("after %v: the new key is not first, before the last newest", s.after)
		}
		gen, prev = g, keys
	}
	if keys, _ := tk.current(start.Add(7*24*time.Hour + 2*time.Hour)); slices.Contains(keys, first[0]) {
		t.Error("a key older than 7 days is still accepted")
	}
}
