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
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// GetCertificate implements tlsterm.Source: the leaf for the name the
// client asks for, issued now when a holds none for it or the one it
// holds is due (a third of its validity left); for a client that asks for
// no name, the leaf for the address it reached, the default one (localhost,
// 127.0.0.1, ::1) for a loopback address. A name a does not issue for, or
// a new one once a holds MaxCertificates leaves, gets the default leaf,
// which the client's verification refuses for that name. It fails only
// before Open, or when a certificate cannot be made (the handshake then
// ends with an internal_error alert).
func (a *Authority) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if a.root.Load() == nil {
		return nil, errors.New("localca: not open")
	}
	name := a.nameFor(hello)
	c, refused, err := a.get(name)
	if refused != "" {
		asked := hello.ServerName
		if asked == "" {
			asked = name // the address reached, without SNI
		}
		a.refused(asked, refused)
		c, _, err = a.get(defaultName)
	}
	return c, err
}

// nameFor returns the name hello's leaf is for ("" for an SNI name that is
// neither a DNS name nor an IP address).
func (a *Authority) nameFor(hello *tls.ClientHelloInfo) string {
	if hello.ServerName != "" {
		return leafKey(clientName(hello.ServerName))
	}
	if hello.Conn != nil {
		if ta, ok := hello.Conn.LocalAddr().(*net.TCPAddr); ok {
			if ip, ok := netip.AddrFromSlice(ta.IP); ok && !ip.Unmap().IsLoopback() {
				return ip.Unmap().String()
			}
		}
	}
	return defaultName
}

// leafKey is the leaf that holds name: the default one for loopback
// addresses.
func leafKey(name string) string {
	if name == "127.0.0.1" || name == "::1" {
		return defaultName
	}
	return name
}

// get returns the leaf for name, issued or renewed when needed; or why it
// refuses to (refused, with c nil).
func (a *Authority) get(name string) (c *tls.Certificate, refused string, err error) {
	now := a.now()
	a.mu.RLock()
	c = a.leaves[name]
	a.mu.RUnlock()
	if c != nil && now.Before(renewAt(c.Leaf)) {
		return c, "", nil
	}
	if !a.policy.allows(name) {
		return nil, "not among the names it issues for", nil
	}
	a.issue.Lock()
	defer a.issue.Unlock()
	a.mu.RLock()
	c, held := a.leaves[name], len(a.leaves)
	a.mu.RUnlock()
	switch {
	case c != nil && now.Before(renewAt(c.Leaf)):
		return c, "", nil // another handshake issued it meanwhile
	case c == nil && name != defaultName && held >= a.opts.MaxCertificates:
		return nil, fmt.Sprintf("it holds max_certificates (%d) already", a.opts.MaxCertificates), nil
	}
	nc, err := a.issueLeaf(name, now)
	if err != nil {
		if c != nil && now.Before(c.Leaf.NotAfter) {
			a.log.Error("local CA: renewing a certificate failed; serving the one it has", "name", name, "error", err)
			return c, "", nil
		}
		return nil, "", err
	}
	a.mu.Lock()
	a.leaves[name] = nc
	a.mu.Unlock()
	msg := "local CA: certificate issued"
	if c != nil {
		msg = "local CA: certificate renewed"
	}
	a.log.Info(msg, "name", name, "not_after", nc.Leaf.NotAfter.UTC().Format(time.RFC3339))
	if err := a.store(name, nc); err != nil {
		a.log.Error("local CA: storing a certificate failed; it is served from memory", "name", name, "error", err)
	}
	return nc, "", nil
}

// refused logs a name refused, at most once a minute.
func (a *Authority) refused(name, why string) {
	now, last := a.now().UnixNano(), a.refusedAt.Load()
	if now-last < int64(time.Minute) || !a.refusedAt.CompareAndSwap(last, now) {
		return
	}
	a.log.Warn("local CA: no certificate for this name; the default one served (localhost)", "name", name, "why", why)
}

// renewAt returns when c is due for renewal: when a third of its validity
// is left.
func renewAt(c *x509.Certificate) time.Time {
	return c.NotAfter.Add(-c.NotAfter.Sub(c.NotBefore) / 3)
}

// issueLeaf makes a leaf for name, valid from now for the lifetime, and
// no longer than the root.
func (a *Authority) issueLeaf(name string, now time.Time) (*tls.Certificate, error) {
	root := a.root.Load()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	notAfter := now.Add(a.opts.Lifetime)
	if notAfter.After(root.Leaf.NotAfter) {
		notAfter = root.Leaf.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	switch ip, err := netip.ParseAddr(name); {
	case name == defaultName:
		tmpl.DNSNames = []string{defaultName}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	case err == nil:
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	default:
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.Leaf, &key.PublicKey, root.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// fileName is the file of name's leaf in the leaves directory.
func fileName(name string) string { return strings.ReplaceAll(name, ":", "_") + ".pem" }

// leafName is the name a stored leaf was issued for.
func leafName(c *x509.Certificate) string {
	if len(c.DNSNames) > 0 {
		return c.DNSNames[0]
	}
	if len(c.IPAddresses) > 0 {
		if ip, ok := netip.AddrFromSlice(c.IPAddresses[0]); ok {
			return ip.Unmap().String()
		}
	}
	return ""
}

// store writes c, name's leaf, with its key, to the leaves directory.
func (a *Authority) store(name string, c *tls.Certificate) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})
	b = append(b, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	return writeFile(filepath.Join(a.opts.Storage, leavesDir, fileName(name)), b, 0o600)
}

// loadLeaves reads the leaves stored: those this root issued, still
// valid, and for names a issues for, up to MaxCertificates (the default
// leaf first, then by name); the other files are removed. Then it issues
// the default leaf if it has none. It is called by Open, a.issue held.
func (a *Authority) loadLeaves(now time.Time) {
	dir := filepath.Join(a.opts.Storage, leavesDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		a.log.Warn("local CA: reading the stored certificates", "error", err)
	}
	root := a.root.Load().Leaf
	found := map[string]*tls.Certificate{}
	var names []string
	removed := 0
	remove := func(path string) {
		if os.Remove(path) == nil {
			removed++
		}
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".pem") || !e.Type().IsRegular() {
			if strings.HasPrefix(e.Name(), ".") && e.Type().IsRegular() {
				remove(path) // a write that did not finish
			}
			continue
		}
		c, err := loadLeaf(path)
		if err != nil {
			remove(path)
			continue
		}
		name := leafName(c.Leaf)
		if fileName(name) != e.Name() || c.Leaf.CheckSignatureFrom(root) != nil || !now.Before(c.Leaf.NotAfter) || !a.policy.allows(name) {
			remove(path)
			continue
		}
		found[name] = c
		names = append(names, name)
	}
	slices.SortFunc(names, func(x, y string) int {
		switch {
		case x == y:
			return 0
		case x == defaultName:
			return -1
		case y == defaultName:
			return 1
		}
		return strings.Compare(x, y)
	})
	a.mu.Lock()
	clear(a.leaves)
	for i, n := range names {
		if i < a.opts.MaxCertificates {
			a.leaves[n] = found[n]
		} else {
			remove(filepath.Join(dir, fileName(n)))
		}
	}
	_, haveDefault := a.leaves[defaultName]
	a.mu.Unlock()
	if removed > 0 {
		a.log.Info("local CA: stored certificates removed (expired, of another root, for names no longer allowed, or past max_certificates)", "count", removed)
	}
	if !haveDefault {
		// Held from the start, so that the bound can never leave a client
		// without a certificate.
		c, err := a.issueLeaf(defaultName, now)
		if err != nil {
			a.log.Error("local CA: issuing the default certificate", "error", err)
			return
		}
		a.mu.Lock()
		a.leaves[defaultName] = c
		a.mu.Unlock()
		if err := a.store(defaultName, c); err != nil {
			a.log.Error("local CA: storing a certificate failed; it is served from memory", "name", defaultName, "error", err)
		}
	}
}

// loadLeaf reads a stored leaf: its certificate and key, in one file.
func loadLeaf(path string) (*tls.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := tls.X509KeyPair(b, b)
	if err != nil {
		return nil, err
	}
	return &c, nil
}
