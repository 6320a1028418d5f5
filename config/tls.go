package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/tlsterm"
)

// listenerTLS walks a listener's "tls" mapping.
func (d *decoder) listenerTLS(n *yaml.Node, path string) *ListenerTLS {
	t := &ListenerTLS{MinVersion: "1.2"}
	n = d.notYet(n, path, "acme",
		"not yet supported: certificates from an ACME CA come in a later version; give certificates: [{cert: FILE, key: FILE}]")
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
	})
	d.required(n, path, present, "certificates")
	return t
}

// notYet reports the key named key in the mapping n, if there is one, as a
// key sluice knows of but does not support yet, with msg; it returns n
// without that key for the walk of the others.
func (d *decoder) notYet(n *yaml.Node, path, key, msg string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return n
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			d.addf(k, join(path, key), "%s", msg)
			rest := *n
			rest.Content = append(append([]*yaml.Node(nil), n.Content[:i]...), n.Content[i+2:]...)
			return &rest
		}
	}
	return n
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
			var s string
			if !d.scalarString(&s, n, path) {
				return
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil || a.Zone() != "" {
					d.addf(n, path, "%q is not an address or an address prefix, such as 10.0.0.0/8 or 127.0.0.1", s)
					return
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			if p.Addr().Is4In6() {
				d.addf(n, path, "write IPv4 addresses as IPv4 (%s): clients are matched so", p.Addr().Unmap())
				return
			}
			list = append(list, p.Masked())
		})
		*dst = list
	}
}

// buildTLS reads the certificates, keys and client CAs of every TLS
// listener of cfg: the settings of each listener (nil for a plain one),
// or an *Error listing every file that cannot be used, each at its
// listener's entry, with its key path, the file and the reason.
func buildTLS(cfg *Config) ([]*tlsterm.Settings, error) {
	var all []*tlsterm.Settings
	var problems []Problem
	problem := func(line int, path string, err error) {
		problems = append(problems, Problem{File: cfg.File, Line: line, Path: path, Msg: err.Error()})
	}
	for i, l := range cfg.Listen {
		if l.TLS == nil {
			all = append(all, nil)
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
			s.Certificates = cs
		}
		all = append(all, s)
	}
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return all, nil
}
