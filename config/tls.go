package config

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/mail"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-proxy/sluice/acme"
	"github.com/sluice-proxy/sluice/localca"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/tlsterm"
)

// listenerTLS walks a listener's "tls" mapping.
func (d *decoder) listenerTLS(n *yaml.Node, path string) *ListenerTLS {
	t := &ListenerTLS{MinVersion: "1.2"}
	var internal *yaml.Node
	present := d.mapping(n, path, []field{
		{"certificates", func(n *yaml.Node, path string) {
			count := d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				f := CertificateFiles{Line: n.Line}
				present := d.mapping(n, path, []field{
					{"cert", d.str(&f.Cert, checkNotEmpty)},
					{"key", d.str(&f.Key, checkNotEmpty)},
				})
				d.required(n, path, present, "cert", "key")
				t.Certificates = append(t.Certificates, f)
			})
			if count == 0 && isList(n) {
				d.addf(n, path, "at least one certificate is required, such as [{cert: /etc/sluice/site.pem, key: /etc/sluice/site.key}]")
			}
		}},
		{"min_version", d.enum(&t.MinVersion, "1.2", "1.3")},
		{"client_auth", func(n *yaml.Node, path string) {
			a := &ClientAuth{Mode: "require", Line: n.Line}
			present := d.mapping(n, path, []field{
				{"ca", d.str(&a.CA, checkNotEmpty)},
				{"mode", d.enum(&a.Mode, "require", "verify_if_given")},
			})
			d.required(n, path, present, "ca")
			t.ClientAuth = a
		}},
		{"acme", func(n *yaml.Node, path string) { t.ACME = d.acme(n, path) }},
		{"internal", func(n *yaml.Node, path string) {
			internal = n
			t.Internal = d.internalTLS(n, path)
		}},
	})
	switch {
	case t.Internal != nil && present["certificates"]:
		d.addf(internal, join(path, "internal"), "with certificates: give one, the files or the local CA")
	case t.Internal != nil && present["acme"]:
		d.addf(internal, join(path, "internal"), "with acme: give one, an ACME CA or the local CA")
	case !present["certificates"] && !present["acme"] && !present["internal"]:
		d.addf(n, join(path, "certificates"), "missing; it is required, or acme to have certificates issued, or internal: true for a local CA's")
	case !present["certificates"] && !present["acme"] && t.Internal == nil:
		d.addf(internal, join(path, "internal"), "is false, and there are no certificates: give certificates, acme, or internal: true")
	}
	return t
}

// internalTLS walks a TLS listener's "internal": true (the defaults),
// false (none: nil), or a mapping of the local CA's settings. The storage
// is checked when the config is built.
func (d *decoder) internalTLS(n *yaml.Node, path string) *InternalTLS {
	t := &InternalTLS{MaxCertificates: localca.DefaultMaxCertificates, Storage: localca.DefaultStorage(), Line: n.Line}
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		on := false
		before := len(d.problems)
		d.boolean(&on)(n, path)
		if len(d.problems) > before {
			d.problems[len(d.problems)-1].Msg += ", or a mapping of the local CA's settings"
			return t // reported: not also as missing certificates
		}
		if !on {
			return nil
		}
		return t
	}
	d.mapping(n, path, []field{
		{"names", func(n *yaml.Node, path string) {
			if n.Kind == yaml.ScalarNode && !isNull(n) {
				d.addf(n, path, "must be a list, such as [%s]", n.Value)
				return
			}
			names := []string{}
			d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				var s string
				if !d.scalarString(&s, n, path) {
					return
				}
				name, err := localca.CheckName(s)
				switch {
				case err != nil:
					d.addf(n, path, "%s", err)
				case slices.Contains(names, name):
					d.addf(n, path, "%s is listed twice", name)
				default:
					names = append(names, name)
				}
			})
			t.Names = names
		}},
		{"any_name", d.boolean(&t.AnyName)},
		{"max_certificates", d.integer(&t.MaxCertificates, between(1, 10000))},
		{"storage", d.str(&t.Storage, checkNotEmpty)},
	})
	return t
}

// acme walks a TLS listener's "acme" mapping. The files it names are
// checked when the config is built.
func (d *decoder) acme(n *yaml.Node, path string) *ACME {
	a := &ACME{Storage: DefaultACMEStorage, Line: n.Line}
	type wildcard struct {
		n    *yaml.Node
		path string
	}
	var wildcards []wildcard // need dns
	redisURL := false        // storage is a redis:// URL, valid or not
	present := d.mapping(n, path, []field{
		{"domains", func(n *yaml.Node, path string) {
			if n.Kind == yaml.ScalarNode && !isNull(n) {
				d.addf(n, path, "must be a list, such as [%s]", n.Value)
				return
			}
			count := d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				var s string
				if !d.scalarString(&s, n, path) {
					return
				}
				name, err := acme.CheckDomain(s)
				switch {
				case err != nil:
					d.addf(n, path, "%s", strings.TrimPrefix(err.Error(), "acme: "))
				case slices.Contains(a.Domains, name):
					d.addf(n, path, "%s is listed twice", name)
				default:
					a.Domains = append(a.Domains, name)
					if strings.HasPrefix(name, "*.") {
						wildcards = append(wildcards, wildcard{n, path})
					}
				}
			})
			if count == 0 && isList(n) {
				d.addf(n, path, "at least one domain is required, such as [example.com, www.example.com]")
			}
		}},
		{"email", d.str(&a.Email, checkEmail)},
		{"ca", d.str(&a.CA, func(s string) (string, string) {
			if err := acme.CheckCA(s); err != nil {
				return "", strings.TrimPrefix(err.Error(), "acme: ")
			}
			return s, ""
		})},
		{"ca_root", d.str(&a.CARoot, checkNotEmpty)},
		{"storage", func(n *yaml.Node, path string) {
			a.storageLine, a.storageColumn = n.Line, n.Column
			redisURL = strings.HasPrefix(n.Value, "redis://") || strings.HasPrefix(n.Value, "rediss://")
			d.str(&a.Storage, checkACMEStorage)(n, path)
		}},
		{"storage_key_file", d.str(&a.StorageKeyFile, checkNotEmpty)},
		{"dns", func(n *yaml.Node, path string) { a.DNS = d.acmeDNS(n, path) }},
	})
	d.required(n, path, present, "domains")
	switch shared := a.RedisStorage() || redisURL; {
	case shared && !present["storage_key_file"]:
		d.addf(n, join(path, "storage_key_file"), "missing; a Redis storage needs the key that encrypts it, shared by the fleet (openssl rand -base64 32 makes one)")
	case !shared && present["storage_key_file"]:
		d.addf(n, join(path, "storage_key_file"), "is for a Redis storage (storage: redis, or a redis:// URL); a directory is guarded by its permissions")
	}
	if a.DNS == nil {
		for _, w := range wildcards {
			d.addf(w.n, w.path, "%s is a wildcard, which only the DNS-01 challenge can validate: add dns, or list the names", w.n.Value)
		}
	}
	return a
}

// checkACMEStorage validates acme.storage: a directory, "redis", or a
// redis:// or rediss:// URL that go-redis takes.
func checkACMEStorage(s string) (string, string) {
	if s == "" {
		return "", "must not be empty"
	}
	if strings.HasPrefix(s, "redis://") || strings.HasPrefix(s, "rediss://") {
		if _, err := redis.ParseURL(s); err != nil {
			return "", "not a Redis URL (redis://[:PASSWORD@]HOST:PORT[/DB]): " + strings.TrimPrefix(err.Error(), "redis: ")
		}
	}
	return s, ""
}

// RedisStorage reports whether a keeps its certificates in Redis: storage
// "redis" or a redis:// URL.
func (a *ACME) RedisStorage() bool {
	return a.Storage == "redis" || strings.HasPrefix(a.Storage, "redis://") || strings.HasPrefix(a.Storage, "rediss://")
}

// checkACMERedis reports each acme section with storage: redis in a file
// without a redis section.
func (d *decoder) checkACMERedis(c *Config) {
	if c.Redis != nil {
		return
	}
	for i, l := range c.Listen {
		if l.TLS != nil && l.TLS.ACME != nil && l.TLS.ACME.Storage == "redis" {
			a := l.TLS.ACME
			d.addf(&yaml.Node{Line: a.storageLine, Column: a.storageColumn}, fmt.Sprintf("listen[%d].tls.acme.storage", i),
				"is redis, but there is no top-level redis section saying which server (redis: {address: host:port}), nor is it a redis:// URL")
		}
	}
}

// acmeDNS walks acme's "dns" mapping; the key file is read when the config
// is built.
func (d *decoder) acmeDNS(n *yaml.Node, path string) *ACMEDNS {
	a := &ACMEDNS{KeyAlgorithm: acme.KeyAlgorithms[0], PropagationTimeout: acme.DefaultPropagationTimeout, Line: n.Line}
	hostPort := func(s string) (string, string) {
		if host, port, err := net.SplitHostPort(s); err != nil || host == "" || port == "" {
			return "", fmt.Sprintf("%q is not a host:port address, such as ns1.example.com:53", s)
		}
		return s, ""
	}
	present := d.mapping(n, path, []field{
		{"server", d.str(&a.Server, hostPort)},
		{"exec", func(n *yaml.Node, path string) {
			if n.Kind == yaml.ScalarNode && !isNull(n) {
				var s string
				if d.scalarString(&s, n, path) {
					if _, msg := checkNotEmpty(s); msg != "" {
						d.addf(n, path, "%s", msg)
						return
					}
					a.Exec = []string{s}
				}
				return
			}
			count := d.sequence(n, path, func(i int, n *yaml.Node, path string) {
				var s string
				if !d.scalarString(&s, n, path) {
					return
				}
				if _, msg := checkNotEmpty(s); i == 0 && msg != "" {
					d.addf(n, path, "%s: the hook program's path", msg)
					return
				}
				a.Exec = append(a.Exec, s)
			})
			if count == 0 && isList(n) {
				d.addf(n, path, "must name the hook program, such as [/usr/local/bin/acme-dns-hook]")
			}
		}},
		{"key_name", d.str(&a.KeyName, checkNotEmpty)},
		{"key_algorithm", d.enum(&a.KeyAlgorithm, acme.KeyAlgorithms...)},
		{"key_file", d.str(&a.KeyFile, checkNotEmpty)},
		{"resolvers", func(n *yaml.Node, path string) {
			if n.Kind == yaml.ScalarNode && !isNull(n) {
				d.addf(n, path, "must be a list, such as [%s]", n.Value)
				return
			}
			d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				var s string
				if !d.scalarString(&s, n, path) {
					return
				}
				if _, msg := hostPort(s); msg != "" {
					d.addf(n, path, "%s", msg)
					return
				}
				a.Resolvers = append(a.Resolvers, s)
			})
		}},
		{"propagation_timeout", d.duration(&a.PropagationTimeout, false)},
		{"override_domain", d.str(&a.OverrideDomain, checkNotEmpty)},
	})
	switch {
	case !present["server"] && !present["exec"]:
		d.addf(n, join(path, "server"), "missing; it is required, or exec for a hook program that writes the records")
	case present["server"] && present["exec"]:
		d.addf(n, join(path, "exec"), "with server: give one, the DNS server that takes updates or the hook program")
	case present["exec"] && (present["key_name"] || present["key_file"]):
		d.addf(n, join(path, "exec"), "with a TSIG key: the hook program sends no updates; leave key_name and key_file out")
	}
	// By value, not by present: a typo of one is reported once, as such.
	switch {
	case a.KeyName != "" && !present["key_file"]:
		d.addf(n, join(path, "key_file"), "missing; it is required with key_name (the key's secret)")
	case a.KeyFile != "" && !present["key_name"]:
		d.addf(n, join(path, "key_name"), "missing; it is required with key_file (the name the server knows the key by)")
	}
	return a
}

// checkEmail validates acme.email: an address alone, local@domain,
// without a display name or angle brackets.
func checkEmail(s string) (string, string) {
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s || !strings.Contains(s[strings.LastIndexByte(s, '@')+1:], ".") {
		return "", fmt.Sprintf("%q is not an email address such as ops@example.com", s)
	}
	return s, ""
}

// prefixes returns a parser of a list of address prefixes (10.0.0.0/8) or
// addresses (127.0.0.1, held as 127.0.0.1/32), stored masked.
func (d *decoder) prefixes(dst *[]netip.Prefix) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if n.Kind == yaml.ScalarNode && !isNull(n) {
			d.addf(n, path, "must be a list, such as [%s]", n.Value)
			return
		}
		list := []netip.Prefix{}
		d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
			if p, ok := d.prefix(n, path, ""); ok {
				list = append(list, p)
			}
		})
		*dst = list
	}
}

// prefix parses an address prefix (10.0.0.0/8) or an address (127.0.0.1,
// as 127.0.0.1/32), masked; more ends the message of a value that is
// neither, naming what else the list takes.
func (d *decoder) prefix(n *yaml.Node, path, more string) (netip.Prefix, bool) {
	var s string
	if !d.scalarString(&s, n, path) {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil || a.Zone() != "" {
			d.addf(n, path, "%q is not an address or an address prefix, such as 10.0.0.0/8 or 127.0.0.1%s", s, more)
			return netip.Prefix{}, false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		d.addf(n, path, "write IPv4 addresses as IPv4 (%s): clients are matched so", p.Addr().Unmap())
		return netip.Prefix{}, false
	}
	return p.Masked(), true
}

// buildTLS reads the certificates, keys and client CAs of every TLS
// listener of g.Config into g.TLS (the settings of each listener, nil for
// a plain one) and g.Files, and makes g's ACME managers, not started. It
// returns an *Error listing every file that cannot be used, and every
// ACME storage that cannot be written to or made, each at its listener's
// entry, with its key path, the file and the reason.
func (g *Generation) buildTLS(log *slog.Logger) error {
	cfg := g.Config
	var problems []Problem
	problem := func(line int, path string, err error) {
		problems = append(problems, Problem{File: cfg.File, Line: line, Path: path, Msg: err.Error()})
	}
	g.TLS = make([]*tlsterm.Settings, len(cfg.Listen))
	g.Files = make([]*tlsterm.Certificates, len(cfg.Listen))
	for i, l := range cfg.Listen {
		if l.TLS == nil {
			continue
		}
		base := fmt.Sprintf("listen[%d].tls", i)
		var certs []*tls.Certificate
		for j, f := range l.TLS.Certificates {
			c, err := tlsterm.LoadPair(f.Cert, f.Key)
			if err != nil {
				key := "cert"
				var fe *tlsterm.FileError
				if errors.As(err, &fe) && fe.Key {
					key = "key"
				}
				problem(f.Line, fmt.Sprintf("%s.certificates[%d].%s", base, j, key), err)
				continue
			}
			certs = append(certs, c)
		}
		s := &tlsterm.Settings{MinVersion: tls.VersionTLS12, NextProtos: proxy.Protocols()}
		if l.TLS.MinVersion == "1.3" {
			s.MinVersion = tls.VersionTLS13
		}
		if a := l.TLS.ClientAuth; a != nil {
			pool, err := tlsterm.LoadCAs(a.CA)
			if err != nil {
				problem(a.Line, base+".client_auth.ca", err)
			}
			s.ClientCAs, s.ClientAuth = pool, tls.RequireAndVerifyClientCert
			if a.Mode == "verify_if_given" {
				s.ClientAuth = tls.VerifyClientCertIfGiven
			}
		}
		if len(certs) == len(l.TLS.Certificates) && len(certs) > 0 {
			cs, err := tlsterm.NewCertificates(certs...)
			if err != nil {
				problem(l.Line, base+".certificates", err)
			}
			s.Certificates, g.Files[i] = cs, cs
		}
		if in := l.TLS.Internal; in != nil {
			ca, err := g.localCA(in, i, log)
			var pe *pathError
			switch {
			case errors.As(err, &pe):
				problem(in.Line, base+".internal."+pe.key, pe.err)
			case err != nil:
				problem(in.Line, base+".internal", err)
			default:
				s.Certificates = ca
			}
		}
		if a := l.TLS.ACME; a != nil {
			s.NextProtos = append(proxy.Protocols(), tlsterm.ACMETLS1)
			slot, err := g.acmeSlot(a, log)
			var pe *pathError
			switch {
			case errors.As(err, &pe):
				problem(a.Line, base+".acme."+pe.key, pe.err)
			case err != nil:
				problem(a.Line, base+".acme", err)
			default:
				slot.listeners = append(slot.listeners, i)
				s.Certificates = slot.m.Source(g.Files[i])
			}
		}
		g.TLS[i] = s
	}
	if len(problems) > 0 {
		return &Error{Problems: problems}
	}
	return nil
}

// localCASlot is a local CA of a Generation, shared by the TLS listeners
// whose internal section names its storage.
type localCASlot struct {
	storage  string // absolute
	opts     localca.Options
	listener int // the first listener with it, for messages
	ca       *localca.Authority
}

// localCA returns g's local CA for the internal section in of listener i,
// made (not opened) the first time a listener names its storage. The
// names default to the routes' hosts. It checks that the storage can be
// written to or made, and that a root stored there can be used; a
// listener that names the storage of an earlier one must give the same
// settings.
func (g *Generation) localCA(in *InternalTLS, i int, log *slog.Logger) (*localca.Authority, error) {
	names := in.Names
	if names == nil {
		for _, r := range g.Config.Routes {
			if n, err := localca.CheckName(r.Host); err == nil && !slices.Contains(names, n) {
				names = append(names, n) // a host that is no name (an empty one: any) left out
			}
		}
	}
	storage, err := filepath.Abs(in.Storage)
	if err != nil {
		return nil, &pathError{"storage", err}
	}
	if err := acme.CheckStorage(in.Storage); err != nil {
		return nil, &pathError{"storage", err}
	}
	if err := localca.Check(in.Storage); err != nil {
		return nil, &pathError{"storage", errors.New(strings.TrimPrefix(err.Error(), "localca: "))}
	}
	opts := localca.Options{Storage: storage, Names: names, AnyName: in.AnyName, MaxCertificates: in.MaxCertificates, Log: log}
	for _, s := range g.localCAs {
		if s.storage != storage {
			continue
		}
		if !slices.Equal(s.opts.Names, opts.Names) || s.opts.AnyName != opts.AnyName || s.opts.MaxCertificates != opts.MaxCertificates {
			return nil, fmt.Errorf("shares its storage %s with listen[%d], whose names, any_name or max_certificates differ: give both the same, or each its own storage", storage, s.listener)
		}
		return s.ca, nil
	}
	ca, err := localca.New(opts)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "localca: "))
	}
	g.localCAs = append(g.localCAs, &localCASlot{storage: storage, opts: opts, listener: i, ca: ca})
	return ca, nil
}

// OpenLocalCAs readies the local CAs of g's listeners (tls.internal): each
// loads its root from its storage, or makes one there the first time,
// and the certificates stored, and logs where its root certificate is and
// how to trust it. A reload opens the same storage again: the CA stays,
// and the certificates it issued. Call it after Build, before serving: a
// local CA not opened gives no certificate.
func (g *Generation) OpenLocalCAs() error {
	for _, s := range g.localCAs {
		if _, err := s.ca.Open(); err != nil {
			l := g.Config.Listen[s.listener]
			return fmt.Errorf("%s:%d: listen[%d].tls.internal: %s", g.Config.File, l.TLS.Internal.Line, s.listener, strings.TrimPrefix(err.Error(), "localca: "))
		}
	}
	return nil
}

// LocalCAs returns the local CAs of g, one for each storage.
func (g *Generation) LocalCAs() []*localca.Authority {
	var cas []*localca.Authority
	for _, s := range g.localCAs {
		cas = append(cas, s.ca)
	}
	return cas
}

// acmeSlot is an ACME manager of a Generation and the TLS listeners it
// serves.
type acmeSlot struct {
	// key is the acme section as configured, with the contents of its
	// ca_root: listeners with equal keys share a manager, and a reload
	// keeps a running manager whose key stays (Carry).
	key       string
	m         *acme.Manager
	listeners []int // indexes in Config.Listen
	started   bool
}

// acmeDNS makes the acme.DNS of a, reading its key file.
func acmeDNS(a *ACMEDNS) (*acme.DNS, error) {
	d := &acme.DNS{Server: a.Server, Exec: a.Exec, KeyName: a.KeyName, KeyAlgorithm: a.KeyAlgorithm, Resolvers: a.Resolvers,
		PropagationTimeout: a.PropagationTimeout, OverrideDomain: a.OverrideDomain}
	if len(a.Exec) > 0 {
		if _, err := exec.LookPath(a.Exec[0]); err != nil {
			return nil, &pathError{"dns.exec", err}
		}
	}
	if a.PropagationTimeout == 0 {
		d.PropagationTimeout = -1 // no wait, where acme.DNS's 0 is its default
	}
	if a.KeyFile != "" {
		b, err := os.ReadFile(a.KeyFile)
		if pe, ok := err.(*fs.PathError); ok {
			err = fmt.Errorf("%s: %w", pe.Path, pe.Err) // as the other files' errors say it
		}
		if err != nil {
			return nil, &pathError{"dns.key_file", err}
		}
		d.Secret = tsigSecret(string(b))
	}
	if _, err := d.Check(); err != nil {
		return nil, &pathError{"dns", errors.New(strings.TrimPrefix(err.Error(), "acme: dns: "))}
	}
	return d, nil
}

// bindSecret finds the secret of a BIND key block (key "name" {
// algorithm hmac-sha256; secret "..."; };).
var bindSecret = regexp.MustCompile(`secret\s+"([^"]*)"`)

// tsigSecret is the base64 secret a key file holds: alone, or in a BIND
// key block, as tsig-keygen writes it.
func tsigSecret(file string) string {
	if m := bindSecret.FindStringSubmatch(file); m != nil {
		return m[1]
	}
	return strings.TrimSpace(file)
}

// pathError is an error of the file or directory under a key of acme.
type pathError struct {
	key string
	err error
}

func (e *pathError) Error() string { return e.key + ": " + e.err.Error() }

// acmeSlot returns g's manager for the acme section a, made (not started)
// the first time a listener has that section. It reads ca_root, and checks
// that storage can be written to or made.
func (g *Generation) acmeSlot(a *ACME, log *slog.Logger) (*acmeSlot, error) {
	var roots *x509.CertPool
	var rootsPEM []byte
	if a.CARoot != "" {
		if _, err := tlsterm.LoadCAs(a.CARoot); err != nil {
			return nil, &pathError{"ca_root", err}
		}
		var err error
		if rootsPEM, err = os.ReadFile(a.CARoot); err != nil {
			return nil, &pathError{"ca_root", err}
		}
		// Trusted besides the system's roots, not instead.
		if roots, err = x509.SystemCertPool(); err != nil {
			roots = x509.NewCertPool()
		}
		roots.AppendCertsFromPEM(rootsPEM)
	}
	var shared *acme.Redis
	storage := a.Storage
	if a.RedisStorage() {
		var err error
		if shared, storage, err = g.acmeRedis(a); err != nil {
			return nil, err
		}
	} else if err := acme.CheckStorage(a.Storage); err != nil {
		return nil, &pathError{"storage", err}
	}
	var dns *acme.DNS
	if a.DNS != nil {
		var err error
		if dns, err = acmeDNS(a.DNS); err != nil {
			return nil, err
		}
	}
	sum := sha256.Sum256(rootsPEM)
	key := fmt.Sprintf("domains=%q email=%q ca=%q ca_root=%q %x storage=%s", a.Domains, a.Email, a.CA, a.CARoot, sum, storage)
	if dns != nil {
		key += fmt.Sprintf(" dns=%q %q %q %q %x %q %s %q", dns.Server, dns.Exec, dns.KeyName, dns.KeyAlgorithm, sha256.Sum256([]byte(dns.Secret)), dns.Resolvers, dns.PropagationTimeout, dns.OverrideDomain)
	}
	for _, s := range g.acme {
		if s.key == key {
			return s, nil
		}
	}
	o := acme.Options{Domains: a.Domains, Email: a.Email, CA: a.CA, Roots: roots, Storage: a.Storage, Log: log, DNS: dns, Redis: shared}
	if shared != nil {
		o.Storage = ""
	}
	m, err := acme.New(o)
	if err != nil {
		return nil, err
	}
	s := &acmeSlot{key: key, m: m}
	g.acme = append(g.acme, s)
	return s, nil
}

// acmeRedis makes the Redis storage options of a, reading its key file:
// the top-level redis section's server for storage: redis, else the
// URL's. It returns them, and what tells them apart from other storages
// (the server, database, user, a digest of the password and of the key)
// for the slot's key.
func (g *Generation) acmeRedis(a *ACME) (*acme.Redis, string, error) {
	b, err := os.ReadFile(a.StorageKeyFile)
	if pe, ok := err.(*fs.PathError); ok {
		err = fmt.Errorf("%s: %w", pe.Path, pe.Err) // as the other files' errors say it
	}
	if err != nil {
		return nil, "", &pathError{"storage_key_file", err}
	}
	key, err := acme.ParseStorageKey(b)
	if err != nil {
		return nil, "", &pathError{"storage_key_file", fmt.Errorf("%s: %w", a.StorageKeyFile, err)}
	}
	var o *redis.Options
	if a.Storage == "redis" {
		r := g.Config.Redis
		o = &redis.Options{Addr: r.Address, Password: r.Password, DB: r.DB}
	} else if o, err = redis.ParseURL(a.Storage); err != nil {
		return nil, "", &pathError{"storage", err} // validated by Parse
	}
	id := fmt.Sprintf("redis addr=%q db=%d user=%q password=%x tls=%v key=%x", o.Addr, o.DB, o.Username,
		sha256.Sum256([]byte(o.Password)), o.TLSConfig != nil, sha256.Sum256(key[:]))
	return &acme.Redis{Options: o, Key: key}, id, nil
}
