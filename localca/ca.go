// Package localca is a certificate authority of sluice's own for local
// use, what Caddy calls "tls internal": a root certificate and its key
// (ECDSA P-256), made once and kept in a storage directory, and a
// short-lived leaf certificate issued on demand for each name a client
// asks for (SNI), kept in memory and on disk and issued again before it
// expires. A client that trusts the root (RootFile) verifies them. It is
// for development and private networks, where no public CA can reach the
// server or knows its names.
//
// What a client can make an Authority do is bounded: it issues only for
// the names it is given (or for any name, when told so), and holds at
// most MaxCertificates leaves. A client that asks for another name, or
// for one past the bound, gets the default certificate (localhost,
// 127.0.0.1, ::1), which its verification then refuses for that name.
//
// An Authority is a tlsterm.Source. New makes one without touching the
// disk (for a check of the configuration); Open loads the root and the
// leaves, or makes the root the first time. Nothing runs in the
// background: a leaf is issued again by the handshake that finds it due.
package localca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/tlsterm"
)

// Defaults.
const (
	// DefaultMaxCertificates bounds the leaves an Authority holds.
	DefaultMaxCertificates = 100
	// DefaultLifetime is a leaf's validity. A leaf is issued again when
	// a third of it is left (at two thirds of its life, as Caddy's).
	DefaultLifetime = 7 * 24 * time.Hour
	// RootLifetime is the root's validity.
	RootLifetime = 10 * 365 * 24 * time.Hour
)

// The files in the storage directory.
const (
	rootCertFile = "root.crt"
	rootKeyFile  = "root.key"
	leavesDir    = "leaves"
)

// backdate is how long before its issue a certificate is made valid, for
// clients whose clocks run a little behind.
const backdate = time.Hour

// Options say what an Authority issues, and where it keeps it.
type Options struct {
	// Storage is the directory of the root (root.crt, root.key) and of
	// the leaves (leaves/NAME.pem); required. Open makes it, mode 0700,
	// when missing.
	Storage string
	// Names are the names a leaf may be issued for, each as CheckName
	// takes it: DNS names, patterns (*.app.test) and IP addresses.
	// localhost, 127.0.0.1 and ::1 are always among them: the default
	// certificate holds them.
	Names []string
	// AnyName issues for any DNS name or IP address a client asks for,
	// Names or not, up to MaxCertificates.
	AnyName bool
	// MaxCertificates is the most leaves held, in memory and on disk,
	// the default one included; 0 means DefaultMaxCertificates.
	MaxCertificates int
	// Lifetime is a leaf's validity; 0 means DefaultLifetime.
	Lifetime time.Duration
	// Log receives the root's location at Open, each leaf issued or
	// renewed, and (at most once a minute) the names refused. nil means
	// slog.Default().
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Authority is a local CA: its root, and the leaves it issued. It is safe
// for concurrent use.
type Authority struct {
	opts   Options
	policy policy
	log    *slog.Logger
	now    func() time.Time

	root   atomic.Pointer[tls.Certificate] // set by Open
	issue  sync.Mutex                      // one issue at a time, and the files
	mu     sync.RWMutex
	leaves map[string]*tls.Certificate // by name; "localhost" is the default

	refusedAt atomic.Int64 // when a refusal was last logged, Unix ns
}

// defaultName names the default leaf, which also holds 127.0.0.1 and ::1.
const defaultName = "localhost"

// New checks o and returns an Authority for it, not yet open. It touches
// no file.
func New(o Options) (*Authority, error) {
	if o.Storage == "" {
		return nil, errors.New("localca: no storage directory")
	}
	if o.MaxCertificates == 0 {
		o.MaxCertificates = DefaultMaxCertificates
	}
	if o.MaxCertificates < 1 {
		return nil, fmt.Errorf("localca: MaxCertificates %d, want 1 or more", o.MaxCertificates)
	}
	if o.Lifetime == 0 {
		o.Lifetime = DefaultLifetime
	}
	if o.Lifetime < time.Minute {
		return nil, fmt.Errorf("localca: lifetime %v, want a minute or more", o.Lifetime)
	}
	p, err := newPolicy(append([]string{defaultName, "127.0.0.1", "::1"}, o.Names...), o.AnyName)
	if err != nil {
		return nil, err
	}
	a := &Authority{opts: o, policy: p, log: o.Log, now: o.Now, leaves: map[string]*tls.Certificate{}}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// RootFile returns the path of the root certificate, the file a client
// trusts (PEM).
func (a *Authority) RootFile() string { return filepath.Join(a.opts.Storage, rootCertFile) }

// Root returns the root certificate; nil before Open.
func (a *Authority) Root() *x509.Certificate {
	if r := a.root.Load(); r != nil {
		return r.Leaf
	}
	return nil
}

// Check checks, without changing anything, that the root stored in dir
// (if there is one) can be used: both files there, readable, the key the
// certificate's, a CA certificate not expired. Whether dir can be written
// to or made is the caller's to check.
func Check(dir string) error {
	_, err := loadRoot(dir, time.Now())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Open readies a for handshakes: it loads the root from storage, or
// makes it there when the directory has none (created reports which),
// and loads the leaves stored that are still valid and allowed, up to
// MaxCertificates (the others are removed); it logs where the root is and
// how to trust it. It fails when the storage cannot be made or written to,
// or holds a root that cannot be used.
func (a *Authority) Open() (created bool, err error) {
	a.issue.Lock()
	defer a.issue.Unlock()
	dir := a.opts.Storage
	if err := os.MkdirAll(filepath.Join(dir, leavesDir), 0o700); err != nil {
		return false, fmt.Errorf("localca: %w", err)
	}
	now := a.now()
	root, err := loadRoot(dir, now)
	if errors.Is(err, fs.ErrNotExist) {
		root, err = makeRoot(dir, now)
		created = err == nil
	}
	if err != nil {
		return false, err
	}
	a.root.Store(root)
	a.loadLeaves(now)
	names := a.opts.Names
	attrs := []any{"root", a.RootFile(), "created", created,
		"not_after", root.Leaf.NotAfter.UTC().Format(time.RFC3339), "names", append([]string{defaultName, "127.0.0.1", "::1"}, names...)}
	if a.opts.AnyName {
		attrs = append(attrs, "any_name", true)
	}
	attrs = append(attrs, "max_certificates", a.opts.MaxCertificates, "trust", TrustHint(a.RootFile()))
	a.log.Info("local CA", attrs...)
	return created, nil
}

// TrustHint says how to make this system's clients trust the root
// certificate in file.
func TrustHint(file string) string {
	curl := "curl --cacert " + file
	switch runtime.GOOS {
	case "darwin":
		return curl + "; for the system and browsers: sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain " + file
	case "linux":
		return curl + "; for the system: sudo cp " + file + " /usr/local/share/ca-certificates/sluice-local-ca.crt && sudo update-ca-certificates (Debian, Ubuntu; Firefox and Chrome keep their own store)"
	case "windows":
		return curl + "; for the system: certutil -addstore -f ROOT " + file
	}
	return curl
}

// loadRoot reads the root from dir: an error satisfying
// errors.Is(fs.ErrNotExist) when neither file is there.
func loadRoot(dir string, now time.Time) (*tls.Certificate, error) {
	certFile, keyFile := filepath.Join(dir, rootCertFile), filepath.Join(dir, rootKeyFile)
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("localca: no root in %s: %w", dir, fs.ErrNotExist)
	case errors.Is(certErr, fs.ErrNotExist):
		return nil, fmt.Errorf("localca: %s is there without %s: restore it, or move both away to make a new CA", keyFile, rootCertFile)
	case errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("localca: %s is there without %s: restore it, or move both away to make a new CA", certFile, rootKeyFile)
	}
	root, err := tlsterm.LoadPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	switch c := root.Leaf; {
	case !c.IsCA || c.KeyUsage&x509.KeyUsageCertSign == 0:
		return nil, fmt.Errorf("localca: %s is not a CA certificate", certFile)
	case now.After(c.NotAfter):
		return nil, fmt.Errorf("localca: the root %s expired on %s: move the storage directory away to make a new CA (and have clients trust the new one)",
			certFile, c.NotAfter.UTC().Format(time.DateOnly))
	}
	if _, ok := root.PrivateKey.(*ecdsa.PrivateKey); !ok {
		return nil, fmt.Errorf("localca: %s: not an ECDSA key", keyFile)
	}
	return root, nil
}

// makeRoot makes a root valid for RootLifetime and writes it to dir: the
// key (mode 0600) first, then the certificate.
func makeRoot(dir string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	host, _ := os.Hostname()
	name := "sluice local CA " + now.UTC().Format(time.DateOnly)
	if host != "" {
		name += " " + host
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"sluice local CA"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(RootLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaves only
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	if err := writeFile(filepath.Join(dir, rootKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	// Public: whoever can reach the directory may read it to trust it.
	if err := writeFile(filepath.Join(dir, rootCertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// serial returns a random serial number of 128 bits, positive.
func serial() *big.Int {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand)
	b[0] &= 0x7f
	b[0] |= 0x01 // not zero, and of a fixed length
	return new(big.Int).SetBytes(b)
}

// writeFile writes b to path with mode, through a temporary file renamed
// over it: a reader sees the old file or the new one, whole.
func writeFile(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("localca: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, mode)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("localca: %w", err)
	}
	return nil
}
