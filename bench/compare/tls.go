package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// tlsName is the name the run's certificate is for, and what the Go
// clients send in SNI and Host. wrk sends the URL's host, 127.0.0.1, which
// the certificate also holds.
const tlsName = "bench.test"

// tlsFiles is the certificate every proxy serves in the TLS scenarios,
// made for the run in the temp dir: a CA, and an ECDSA P-256 certificate
// it signed for tlsName and 127.0.0.1.
type tlsFiles struct {
	cert, key string // the leaf (PEM), and its key (PKCS #8 PEM)
	pem       string // the leaf, then its key, in one file (HAProxy's crt)
	roots     *x509.CertPool
}

// makeTLSFiles makes the CA and the certificate and writes them into dir.
// No key leaves the temp dir, and none is committed.
func makeTLSFiles(dir string) (*tlsFiles, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench/compare CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: tlsName},
		DNSNames: []string{tlsName}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	f := &tlsFiles{
		cert:  filepath.Join(dir, "cert.pem"),
		key:   filepath.Join(dir, "key.pem"),
		pem:   filepath.Join(dir, "cert-and-key.pem"),
		roots: x509.NewCertPool(),
	}
	f.roots.AddCert(ca)
	for path, data := range map[string][]byte{f.cert: certPEM, f.key: keyPEM, f.pem: append(slices.Clip(certPEM), keyPEM...)} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// clientTLS is what the Go clients of the run offer (the checks, the idle
// connections and bench/tlsload): TLS 1.3 with X25519 alone, the key share
// OpenSSL 3.0's client (wrk's) sends, and no ALPN, as wrk. The checks
// verify the certificate against the run's CA.
func (f *tlsFiles) clientTLS() *tls.Config {
	return &tls.Config{
		ServerName:       tlsName,
		RootCAs:          f.roots,
		MinVersion:       tls.VersionTLS13,
		CurvePreferences: []tls.CurveID{tls.X25519},
	}
}

// negotiated is what a TLS handshake settled on, as a client saw it.
type negotiated struct {
	protocol, cipher, group string
	alpn                    string // the application protocol, for h2load; "" for none or not known
	full, resumed           int64  // handshakes of each kind; both 0 for a single check
}

func (n negotiated) String() string {
	s := fmt.Sprintf("%s %s %s", n.protocol, n.cipher, n.group)
	if n.alpn != "" {
		s += " ALPN " + n.alpn
	}
	return s
}

// sslCheck asks openssl s_client, the OpenSSL that wrk links, what a
// handshake with the proxy on port negotiates: wrk offers what s_client
// offers, from the same library and defaults.
func sslCheck(ctx context.Context, openssl string, port int) (negotiated, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, openssl, "s_client", "-brief", "-connect", fmt.Sprintf("127.0.0.1:%d", port))
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return negotiated{}, fmt.Errorf("openssl s_client: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return parseSClient(out)
}

// parseSClient reads what openssl s_client -brief prints of a handshake:
//
//	CONNECTION ESTABLISHED
//	Protocol version: TLSv1.3
//	Ciphersuite: TLS_AES_128_GCM_SHA256
//	...
//	Server Temp Key: X25519, 253 bits
//
// A field missing is an error: the table must not show a guess.
func parseSClient(out []byte) (negotiated, error) {
	var n negotiated
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Protocol version":
			n.protocol = v
		case "Ciphersuite":
			n.cipher = v
		case "Server Temp Key":
			n.group, _, _ = strings.Cut(v, ",")
		}
	}
	if n.protocol == "" || n.cipher == "" || n.group == "" {
		return n, fmt.Errorf("openssl s_client: no protocol, cipher suite or key exchange in %q", strings.TrimSpace(string(out)))
	}
	return n, nil
}

// parseTLSStates reads bench/tlsload's TLS-STATE lines: each kind of
// handshake in a run and how many there were. More than one version,
// cipher suite or group in a run is an error: the run's figures would mix
// two things.
func parseTLSStates(out []byte) (negotiated, error) {
	var n negotiated
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "TLS-STATE" {
			continue
		}
		if len(f) != 6 {
			return n, fmt.Errorf("tlsload: state line %q", sc.Text())
		}
		count, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil || count < 0 {
			return n, fmt.Errorf("tlsload: state line %q: bad count", sc.Text())
		}
		if n.protocol == "" {
			n.protocol, n.cipher, n.group = f[1], f[2], f[3]
		} else if n.protocol != f[1] || n.cipher != f[2] || n.group != f[3] {
			return n, fmt.Errorf("tlsload: handshakes of one run negotiated both %s and %s", n, strings.Join(f[1:4], " "))
		}
		switch f[4] {
		case "full":
			n.full += count
		case "resumed":
			n.resumed += count
		default:
			return n, fmt.Errorf("tlsload: state line %q: neither full nor resumed", sc.Text())
		}
	}
	if n.protocol == "" {
		return n, errors.New("tlsload printed no TLS-STATE line")
	}
	return n, nil
}

// loadTLS is clientTLS without verifying the certificate, for the load:
// wrk does not verify either (the server's signature is checked still).
func (f *tlsFiles) loadTLS() *tls.Config {
	c := f.clientTLS()
	c.RootCAs, c.InsecureSkipVerify = nil, true
	return c
}
