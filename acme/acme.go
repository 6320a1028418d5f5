// Package acme gets a TLS listener its certificates from an ACME CA (RFC
// 8555; Let's Encrypt by default): a Manager obtains a certificate for each
// of its domains in the background, renews it well before it expires,
// staples its OCSP response when the CA gives one, and keeps it on disk,
// so that a restart serves what it stored instead of asking again.
//
// The protocol is certmagic's (github.com/caddyserver/certmagic); the CA's
// challenges are answered by sluice's own listeners: TLS-ALPN-01 in the
// TLS handshake (a Manager is the listener's tlsterm.Source, its config
// offering tlsterm.ACMETLS1), HTTP-01 by a plain listener's
// proxy.ListenerOptions.Filter (HTTPChallenges); or, with Options.DNS,
// DNS-01 by RFC 2136 dynamic updates (dns.go), the way to wildcards. A
// Manager owns what runs in the background for it: Start begins it, Stop
// ends it.
package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluice-proxy/sluice/tlsterm"
)

// LetsEncrypt is the directory of Let's Encrypt's production CA, the
// default.
const LetsEncrypt = certmagic.LetsEncryptProductionCA

// Options say what a Manager obtains, from where, and where it keeps it.
type Options struct {
	// Domains are the names to get certificates for, a certificate
	// each; at least one. Each is a DNS name (any case, a trailing dot
	// ignored); a wildcard (*.example.com) only with DNS, as the CA
	// validates one by DNS-01 alone.
	Domains []string
	// Email is the ACME account's contact address, for the CA to write
	// to about the certificates; "" registers an account without one.
	// Configuring a Manager agrees to the CA's terms of service.
	Email string
	// CA is the URL of the ACME directory, https; "" means LetsEncrypt.
	CA string
	// Roots verify the ACME CA's own TLS certificate (not the
	// certificates it issues); nil means the system's roots.
	Roots *x509.CertPool
	// Storage is the directory of the account, the certificates and
	// their keys (made with mode 0700 when missing); required unless
	// Redis is set. Each certificate's files are kept there until it is
	// renewed, and a Manager started on the same directory serves them
	// at once.
	Storage string
	// Redis, when set, keeps them in a Redis server instead of Storage,
	// encrypted, for a fleet: the Managers of every sluice sharing it
	// (the same server, prefix and key) obtain each certificate once,
	// the one that takes its lock, and the others load it; renewal
	// likewise. The CA's validation must reach the instance that holds
	// the order: DNS-01 does wherever it runs; HTTP-01 and TLS-ALPN-01
	// need the CA sent to that instance.
	Redis *Redis
	// Log receives what the Manager does: each certificate obtained,
	// renewed or loaded at info level, failures as errors;
	// certmagic's own narration at debug level. nil means slog.Default().
	Log *slog.Logger

	// DNS, when set, answers the CA's challenges by DNS-01 (TXT records
	// written by dynamic updates) instead of the listeners' HTTP-01 and
	// TLS-ALPN-01: for wildcards, and for servers the CA cannot reach.
	DNS *DNS

	// RenewalWindowRatio is the part of a certificate's lifetime left
	// when it is renewed, unless the CA's renewal information (ARI, RFC
	// 9773) names an earlier time; 0 means a third (30 days of a 90-day
	// certificate, 2 of a 6-day one).
	RenewalWindowRatio float64
	// RenewCheckInterval is how often the certificates are checked for
	// renewal; 0 means 10 minutes.
	RenewCheckInterval time.Duration

	// noARI renews by RenewalWindowRatio alone, for tests: pebble's
	// renewal window spans the whole life of the seconds-long
	// certificates they use, so that its suggested time may come at once,
	// before the other instances of a fleet test loaded the certificate.
	noARI bool
}

// Manager obtains and renews the certificates of Options.Domains. Its
// GetCertificate serves them (it is a tlsterm.Source), and answers an ACME
// CA's TLS-ALPN-01 validation. New makes it; nothing runs until Start, and
// Stop ends it. It is safe for concurrent use.
type Manager struct {
	opts    Options
	domains []string // normalized, as the certificates name them
	log     *slog.Logger

	mu      sync.Mutex
	run     atomic.Pointer[running] // set by Start
	stopped bool

	// have holds the domains with a certificate in the cache: the
	// others are not asked of certmagic, whose miss is not cheap.
	have sync.Map
	// obtained holds the domains whose certificate this Manager
	// obtained, logged as such rather than as loaded from storage.
	obtained sync.Map
}

// running is a started Manager's certmagic.
type running struct {
	magic    *certmagic.Config
	cache    *certmagic.Cache
	storage  *storage
	client   *redis.Client // of a Redis storage, closed by stop
	cancel   context.CancelFunc
	stopping atomic.Bool // certmagic's complaints are the cancellation's

	stored     []string      // the domains with a certificate in storage at Start
	loaded     chan struct{} // closed once each of stored has one in the cache
	loadedOnce sync.Once
}

// New checks o and returns a Manager for it, not yet started.
func New(o Options) (*Manager, error) {
	if len(o.Domains) == 0 {
		return nil, errors.New("acme: no domains")
	}
	m := &Manager{opts: o, log: o.Log}
	if m.log == nil {
		m.log = slog.Default()
	}
	for _, d := range o.Domains {
		name, err := CheckDomain(d)
		if err != nil {
			return nil, err
		}
		if slices.Contains(m.domains, name) {
			return nil, fmt.Errorf("acme: domain %s given twice", name)
		}
		if o.DNS == nil && strings.HasPrefix(name, "*.") {
			return nil, fmt.Errorf("acme: %s is a wildcard, which only the DNS-01 challenge can validate: configure dns, or list the names", name)
		}
		m.domains = append(m.domains, name)
	}
	if o.DNS != nil {
		d, err := o.DNS.Check()
		if err != nil {
			return nil, err
		}
		m.opts.DNS = &d
	}
	if o.CA != "" {
		if err := CheckCA(o.CA); err != nil {
			return nil, err
		}
	}
	if o.Storage == "" && o.Redis == nil {
		return nil, errors.New("acme: no storage directory")
	}
	if o.Redis != nil && o.Redis.Options == nil {
		return nil, errors.New("acme: redis storage without its server's options")
	}
	if o.RenewalWindowRatio < 0 || o.RenewalWindowRatio >= 1 {
		return nil, fmt.Errorf("acme: renewal window ratio %v, want 0 (the default) or between 0 and 1", o.RenewalWindowRatio)
	}
	return m, nil
}

// Domains returns the domains m gets certificates for, normalized: lower
// case, without a trailing dot.
func (m *Manager) Domains() []string { return slices.Clone(m.domains) }

// Options returns the options m was made with.
func (m *Manager) Options() Options { return m.opts }

// Challenges say where an ACME CA's validation of a challenge reaches the
// server, for Start. Each is the address, as bound, of a listener that
// answers one kind of challenge; nil leaves that kind out, and the CA
// validates with the other.
//
// certmagic answers a challenge with a server of its own unless the
// address it would listen on is taken, when it leaves the answer to what
// holds the address; pointed at sluice's listeners, it never listens.
type Challenges struct {
	// TLSALPN is the TLS listener that serves the Manager's
	// certificates, where TLS-ALPN-01 validation arrives (port 443).
	TLSALPN net.Addr
	// HTTP is a plain listener on the same address as TLSALPN but for
	// its port, with HTTPChallenges as its filter, where HTTP-01
	// validation arrives (port 80).
	HTTP net.Addr
}

// issuer turns ch into an ACMEIssuer's challenge settings.
func (ch Challenges) issuer(iss *certmagic.ACMEIssuer) error {
	tcp := func(a net.Addr) (*net.TCPAddr, error) {
		ta, ok := a.(*net.TCPAddr)
		if !ok {
			return nil, fmt.Errorf("acme: a challenge's listener is %s, not TCP", a)
		}
		return ta, nil
	}
	iss.DisableTLSALPNChallenge, iss.DisableHTTPChallenge = ch.TLSALPN == nil, ch.HTTP == nil
	var host net.IP
	if ch.TLSALPN != nil {
		ta, err := tcp(ch.TLSALPN)
		if err != nil {
			return err
		}
		host, iss.AltTLSALPNPort = ta.IP, ta.Port
	}
	if ch.HTTP != nil {
		ta, err := tcp(ch.HTTP)
		if err != nil {
			return err
		}
		if host != nil && !host.Equal(ta.IP) {
			return fmt.Errorf("acme: the HTTP-01 listener %s is not on the TLS-ALPN-01 listener's address %s", ch.HTTP, ch.TLSALPN)
		}
		host, iss.AltHTTPPort = ta.IP, ta.Port
	}
	if host == nil {
		return errors.New("acme: no listener answers a challenge")
	}
	iss.ListenHost = host.String()
	return nil
}

// Start begins obtaining the certificates m has not stored, and keeping
// them all renewed, until Stop or the end of ctx. It returns at once:
// certificates come in the background, retried with growing waits when
// the CA or its validation fails, and until one comes its domain has none
// (see GetCertificate). It fails when m was started before, or ch names no
// listener that answers a challenge.
func (m *Manager) Start(ctx context.Context, ch Challenges) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.stopped:
		return errors.New("acme: Manager stopped")
	case m.run.Load() != nil:
		return errors.New("acme: Manager started twice")
	}
	r := &running{storage: &storage{Storage: &certmagic.FileStorage{Path: m.opts.Storage}}}
	where := m.opts.Storage
	if o := m.opts.Redis; o != nil {
		r.client = redis.NewClient(o.Options)
		rs, err := newRedisStorage(r.client, o.Prefix, o.Key)
		if err != nil {
			r.client.Close()
			return fmt.Errorf("acme: %w", err)
		}
		r.storage.Storage = rs
		where = "redis " + o.Options.Addr
	}
	zl := zap.New(&zapCore{h: m.log.Handler(), stopping: &r.stopping}).Named("acme")
	var magic atomic.Pointer[certmagic.Config]
	r.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return magic.Load(), nil },
		RenewCheckInterval: m.opts.RenewCheckInterval,
		Logger:             zl,
	})
	r.magic = certmagic.New(r.cache, certmagic.Config{
		RenewalWindowRatio: m.opts.RenewalWindowRatio,
		DisableARI:         m.opts.noARI,
		Storage:            r.storage,
		Logger:             zl,
		OnEvent:            m.onEvent,
		ShouldEmitFunc:     watched,
		// Without a proxy function certmagic fetches OCSP responses with
		// http.DefaultClient, which has no timeout: a responder that
		// does not answer would hold a certificate from being served,
		// and Stop, for as long as the connection lasts. With one, its
		// client gives up after 30 s; a staple that cannot be had is
		// logged, and the certificate served without.
		OCSP: certmagic.OCSPConfig{HTTPProxy: http.ProxyFromEnvironment},
	})
	magic.Store(r.magic)
	tmpl := certmagic.ACMEIssuer{
		CA:     m.opts.CA,
		Email:  m.opts.Email,
		Agreed: true,
		// Challenges are answered from this process's memory
		// (HTTPChallenges, GetCertificate), not from tokens in
		// storage that another process wrote.
		DisableDistributedSolvers: true,
		TrustedRoots:              m.opts.Roots, // nil: the system's
		Logger:                    zl,
	}
	if m.opts.DNS != nil {
		tmpl.DNS01Solver = m.opts.DNS.solver(zl)
	} else if err := ch.issuer(&tmpl); err != nil {
		r.cache.Stop()
		r.close()
		return err
	}
	iss := certmagic.NewACMEIssuer(r.magic, tmpl)
	r.magic.Issuers = []certmagic.Issuer{iss}
	r.loaded = make(chan struct{})
	for _, d := range m.domains {
		if r.storage.Exists(ctx, certmagic.StorageKeys.SiteCert(iss.IssuerKey(), d)) {
			r.stored = append(r.stored, d)
		}
	}
	if len(r.stored) == 0 {
		r.loadedOnce.Do(func() { close(r.loaded) })
	}
	ctx, r.cancel = context.WithCancel(ctx)
	m.run.Store(r)
	var kinds []string
	switch {
	case tmpl.DNS01Solver != nil:
		kinds = append(kinds, "dns-01")
	default:
		if !tmpl.DisableHTTPChallenge {
			kinds = append(kinds, "http-01")
		}
		if !tmpl.DisableTLSALPNChallenge {
			kinds = append(kinds, "tls-alpn-01")
		}
	}
	ca := m.opts.CA
	if ca == "" {
		ca = LetsEncrypt
	}
	m.log.Info("ACME certificates managed", "domains", m.domains, "ca", ca, "storage", where, "challenges", kinds)
	if err := r.magic.ManageAsync(ctx, m.domains); err != nil {
		m.stop(r)
		return fmt.Errorf("acme: %w", err)
	}
	return nil
}

// Ready waits until the certificates that m found in storage when it
// started are loaded and served (loading one may wait for its OCSP
// response, up to 30 s), or until ctx ends, whose error it then returns.
// Those it must obtain are not waited for. A server that waits for it
// before serving, or before a reload hands its listeners to m, refuses no
// client a certificate it has on disk.
func (m *Manager) Ready(ctx context.Context) error {
	r := m.run.Load()
	if r == nil {
		return errors.New("acme: Manager not started")
	}
	select {
	case <-r.loaded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ends what m runs: the certificate operations under way are
// cancelled (their requests to the CA too), certmagic's maintenance (the
// renewal and OCSP checks) stops, and the storage is closed to m: Stop
// returns once no operation of m's is under way there and no lock of m's
// is held, and m touches it no more, so that another Manager may take it
// over. The certificates obtained stay in it. Stop waits at most 5 s for
// certmagic's maintenance, which may be in an OCSP request that nothing
// cancels (up to 30 s): past that it logs a warning and returns, and the
// maintenance ends after that request, the storage closed to it. (What
// else is left of certmagic then ends by itself, with nothing of m's to
// do: a goroutine that kept a released lock file fresh, within 5 s; an
// OCSP request for a certificate being loaded, within 30 s.)
// GetCertificate serves no certificate after Stop. Stop may be called
// more than once, and before Start.
func (m *Manager) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	if r := m.run.Load(); r != nil {
		m.stop(r)
	}
}

// maintenanceWait bounds Stop's wait for certmagic's maintenance, which
// may be in an OCSP request, which no context cancels (30 s each).
const maintenanceWait = 5 * time.Second

func (m *Manager) stop(r *running) {
	if r.stopping.Swap(true) {
		return
	}
	r.cancel()
	stopped := make(chan struct{})
	go func() {
		r.cache.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(maintenanceWait):
		m.log.Warn("ACME: certmagic's maintenance did not stop within 5 s (an OCSP request, likely); it ends after it", "domains", m.domains)
	}
	r.storage.drain()
	r.close()
	m.have.Clear()
}

// close closes r's Redis client, if it has one.
func (r *running) close() {
	if r.client != nil {
		r.client.Close()
	}
}

// GetCertificate implements tlsterm.Source: the certificate of the domain
// the client names; for a client that names none of them (or no name),
// the certificate of the first domain that has one. An ACME CA validating
// a TLS-ALPN-01 challenge that this process has under way gets the
// challenge's certificate. Until a domain's certificate has been obtained
// (and after Stop), a client that asks for it is refused: the error ends
// its handshake with an internal_error alert.
func (m *Manager) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if tlsterm.ChallengeHello(hello) {
		return m.challengeCertificate(hello)
	}
	if c := m.lookup(hello); c != nil {
		return c, nil
	}
	if c := m.first(hello); c != nil {
		return c, nil
	}
	name := hello.ServerName
	if name == "" || !slices.Contains(m.domains, normalize(name)) {
		name = m.domains[0]
	}
	return nil, fmt.Errorf("acme: no certificate for %s yet", name)
}

// lookup returns the certificate of the domain hello names, or of the
// wildcard that holds it (*.example.com for www.example.com), nil when m
// manages neither or has no certificate for it yet.
func (m *Manager) lookup(hello *tls.ClientHelloInfo) *tls.Certificate {
	if hello.ServerName == "" {
		return nil
	}
	name := normalize(hello.ServerName)
	if c := m.cert(hello, name); c != nil {
		return c
	}
	if _, parent, ok := strings.Cut(name, "."); ok && strings.Contains(parent, ".") {
		return m.cert(hello, "*."+parent)
	}
	return nil
}

// first returns the certificate of the first domain with one.
func (m *Manager) first(hello *tls.ClientHelloInfo) *tls.Certificate {
	for _, d := range m.domains {
		h := *hello
		h.ServerName = d
		if c := m.cert(&h, d); c != nil {
			return c
		}
	}
	return nil
}

// cert asks certmagic for domain's certificate (it picks among several,
// while a renewed one replaces the one before), when it has one.
func (m *Manager) cert(hello *tls.ClientHelloInfo, domain string) *tls.Certificate {
	if _, ok := m.have.Load(domain); !ok {
		return nil
	}
	r := m.run.Load()
	if r == nil || r.stopping.Load() {
		return nil
	}
	c, err := r.magic.GetCertificate(hello)
	if err != nil {
		return nil
	}
	return c
}

// Source returns the Source of a TLS listener that serves files beside m's
// certificates: a file's certificate that names the client's name exactly,
// then m's for its domains, then a file's whose wildcard holds the name,
// then the files' default (the first file). An ACME CA's TLS-ALPN-01
// validation is m's whatever the files hold. With files nil, it is m.
func (m *Manager) Source(files *tlsterm.Certificates) tlsterm.Source {
	if files == nil {
		return m
	}
	return &source{m: m, files: files}
}

type source struct {
	m     *Manager
	files *tlsterm.Certificates
}

func (s *source) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if tlsterm.ChallengeHello(hello) {
		return s.m.challengeCertificate(hello)
	}
	c, exact := s.files.Lookup(hello)
	if exact {
		return c, nil
	}
	if mc := s.m.lookup(hello); mc != nil {
		return mc, nil
	}
	if c != nil {
		return c, nil
	}
	return s.files.GetCertificate(hello)
}

// watched says which of certmagic's events onEvent takes: not the one
// of every handshake.
func watched(event string) bool {
	switch event {
	case "cached_managed_cert", "cert_obtained", "cert_ocsp_revoked":
		return true
	}
	return false
}

// onEvent logs what certmagic did that an operator wants to know of (a
// line for each certificate obtained, renewed, or loaded from storage, with
// its names and expiry), and notes the domains that have a certificate.
func (m *Manager) onEvent(ctx context.Context, event string, data map[string]any) error {
	r := m.run.Load()
	if r == nil {
		return nil
	}
	switch event {
	case "cached_managed_cert":
		names, _ := data["sans"].([]string)
		for _, n := range names {
			name := normalize(n)
			m.have.Store(name, struct{}{})
			if _, ok := m.obtained.Load(name); ok {
				continue
			}
			for _, c := range r.cache.AllMatchingCertificates(name) {
				if c.Leaf != nil {
					m.logCertificate("ACME certificate loaded from storage", c.Leaf)
					break
				}
			}
		}
		if !slices.ContainsFunc(r.stored, func(d string) bool { _, ok := m.have.Load(d); return !ok }) {
			r.loadedOnce.Do(func() { close(r.loaded) })
		}
	case "cert_obtained":
		name, _ := data["identifier"].(string)
		m.obtained.Store(normalize(name), struct{}{})
		msg := "ACME certificate obtained"
		if renewal, _ := data["renewal"].(bool); renewal {
			msg = "ACME certificate renewed"
		}
		key, _ := data["certificate_path"].(string)
		leaf, err := r.storage.leaf(ctx, key)
		if err != nil {
			m.log.Info(msg, "names", []string{name}, "error", err)
			break
		}
		m.logCertificate(msg, leaf)
	case "cert_ocsp_revoked":
		m.log.Warn("ACME certificate revoked, says its OCSP response; renewing it", "names", data["subjects"])
	}
	return nil
}

func (m *Manager) logCertificate(msg string, leaf *x509.Certificate) {
	m.log.Info(msg, "names", leaf.DNSNames, "not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "issuer", leaf.Issuer.CommonName)
}

// normalize writes a name as the certificates do: lower case, without a
// trailing dot.
func normalize(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// CheckDomain checks that name can be a Manager's domain and returns it
// normalized: a DNS name of letters, digits and hyphens (an IDN in its
// xn-- form), or a wildcard of one (*.example.com: one label, the first;
// not a public suffix alone, which no CA issues for), not an IP address.
// A wildcard needs Options.DNS.
func CheckDomain(name string) (string, error) {
	n := normalize(name)
	if rest, ok := strings.CutPrefix(n, "*."); ok {
		if !strings.Contains(rest, ".") {
			return "", fmt.Errorf("acme: %s is a wildcard of a top-level domain, which no CA issues", name)
		}
		if strings.Contains(rest, "*") {
			return "", fmt.Errorf("acme: %s: a wildcard is one label, the first", name)
		}
		if _, err := CheckDomain(rest); err != nil {
			return "", fmt.Errorf("acme: %s is not a wildcard of a domain name (%s)", name, strings.TrimPrefix(err.Error(), "acme: "))
		}
		return n, nil
	}
	switch {
	case n == "":
		return "", errors.New("acme: an empty domain")
	case net.ParseIP(strings.Trim(n, "[]")) != nil:
		return "", fmt.Errorf("acme: %s is an IP address; name a domain", name)
	case len(n) > 253:
		return "", fmt.Errorf("acme: %s is longer than a domain can be (253)", name)
	}
	for _, l := range strings.Split(n, ".") {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("acme: %s is not a domain name: each label 1 to 63 letters, digits or hyphens, not starting or ending with one", name)
		}
		for _, c := range []byte(l) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return "", fmt.Errorf("acme: %s is not a domain name: %q is not allowed in one (write an IDN in its xn-- form)", name, c)
			}
		}
	}
	return n, nil
}

// CheckCA checks an ACME directory URL: https, with a host.
func CheckCA(ca string) error {
	u, err := url.Parse(ca)
	if err != nil {
		return fmt.Errorf("acme: CA %q is not a URL: %v", ca, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("acme: CA %q is not an https:// URL of an ACME directory", ca)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("acme: CA %q has port %s", ca, p)
		}
	}
	return nil
}
