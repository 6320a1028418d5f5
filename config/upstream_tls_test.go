package config

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/tlstest"
)

// TestClientTLS reads an upstream's tls files into the proxy's settings,
// and names the file and what is wrong when one does not do.
func TestClientTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "config CA")
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.PEM, 0o600)
	certFile, keyFile := ca.Client(t, "sluice").Write(t, dir, "cert")
	otherKeyDir := t.TempDir()
	_, otherKey := ca.Client(t, "someone else").Write(t, otherKeyDir, "cert")
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello\n"), 0o600)
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name string
		tls  UpstreamTLS
		err  string // "" for none
	}{
		{"everything", UpstreamTLS{ServerName: "api.internal", CA: caFile, Cert: certFile, Key: keyFile}, ""},
		{"nothing: system roots", UpstreamTLS{}, ""},
		{"ca missing", UpstreamTLS{CA: missing}, "tls.ca: open " + missing + ": no such file or directory"},
		{"ca not PEM", UpstreamTLS{CA: notPEM}, "tls.ca " + notPEM + ": no PEM certificate in the file"},
		{"cert missing", UpstreamTLS{Cert: missing, Key: keyFile}, "tls.cert: open " + missing},
		{"key missing", UpstreamTLS{Cert: certFile, Key: missing}, "tls.key: open " + missing},
		{"key of another certificate", UpstreamTLS{Cert: certFile, Key: otherKey},
			"tls.cert " + certFile + " and tls.key " + otherKey + ": tls: private key does not match public key"},
		{"cert not PEM", UpstreamTLS{Cert: notPEM, Key: keyFile}, "tls.cert " + notPEM + " and tls.key " + keyFile + ": tls: failed to find any PEM data in certificate input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := clientTLS(&tt.tls)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := got.Config
			if cfg.ServerName != tt.tls.ServerName || (cfg.RootCAs != nil) != (tt.tls.CA != "") || (cfg.GetClientCertificate != nil) != (tt.tls.Cert != "") {
				t.Fatalf("config %+v from %+v", cfg, tt.tls)
			}
			if cfg.GetClientCertificate != nil {
				// Presented whatever authorities the server names.
				c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{AcceptableCAs: [][]byte{[]byte("some other CA")}})
				if err != nil || c.Leaf == nil || c.Leaf.Subject.CommonName != "sluice" {
					t.Fatalf("client certificate %v, %v", c, err)
				}
			}
		})
	}
}

// TestClientTLSID: the ID that keys pooled connections is the same for
// the same settings, read again (a reload), and differs when anything
// they verify with or present does.
func TestClientTLSID(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "config CA"), tlstest.NewCA(t, "other CA")
	caFile, otherFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other.pem")
	os.WriteFile(caFile, ca.PEM, 0o600)
	os.WriteFile(otherFile, other.PEM, 0o600)
	certFile, keyFile := ca.Client(t, "sluice").Write(t, dir, "cert")
	id := func(u UpstreamTLS) string {
		t.Helper()
		got, err := clientTLS(&u)
		if err != nil {
			t.Fatal(err)
		}
		return got.ID
	}
	base := UpstreamTLS{CA: caFile}
	if id(base) != id(UpstreamTLS{CA: caFile, Line: 7}) {
		t.Fatal("equal settings read twice got different IDs")
	}
	tests := []struct {
		name string
		a, b UpstreamTLS
	}{
		{"another CA", base, UpstreamTLS{CA: otherFile}},
		{"the system's roots", base, UpstreamTLS{}},
		{"a server name", base, UpstreamTLS{CA: caFile, ServerName: "api.internal"}},
		{"a client certificate", base, UpstreamTLS{CA: caFile, Cert: certFile, Key: keyFile}},
		{"no verification", UpstreamTLS{}, UpstreamTLS{InsecureSkipVerify: true}},
	}
	for _, tt := range tests {
		if id(tt.a) == id(tt.b) {
			t.Errorf("%s: the same ID as without", tt.name)
		}
	}
}
