package config

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/acme"
	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/proxy"
)

// rest completes a file whose first lines are its listen section.
const rest = "routes: [{upstream: web}]\nupstreams:\n  web:\n    servers: [{address: \"127.0.0.1:9001\"}]\n"

func TestParseTLSDefaults(t *testing.T) {
	c, err := Parse("t.yaml", []byte("listen:\n  - address: 127.0.0.1:8443\n    tls:\n      certificates: [{cert: a.pem, key: a.key}]\n"+rest))
	if err != nil {
		t.Fatal(err)
	}
	want := &ListenerTLS{Certificates: []CertificateFiles{{Cert: "a.pem", Key: "a.key", Line: 4}}, MinVersion: "1.2"}
	if got := c.Listen[0].TLS; !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if c.Forwarded.Trusted != nil || c.Listen[0].RedirectHTTPS || c.Listen[0].HTTPSPort != 0 {
		t.Errorf("defaults: trusted %v, redirect %v, https_port %d", c.Forwarded.Trusted, c.Listen[0].RedirectHTTPS, c.Listen[0].HTTPSPort)
	}
	c, err = Parse("t.yaml", []byte("listen:\n  - address: 127.0.0.1:8443\n    tls:\n      certificates: [{cert: a.pem, key: a.key}]\n      client_auth: {ca: ca.pem}\n"+rest))
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Listen[0].TLS.ClientAuth; a == nil || a.Mode != "require" {
		t.Errorf("client_auth without a mode: %+v, want mode require", a)
	}
}

func TestParseTLSProblems(t *testing.T) {
	listen := func(lines ...string) string {
		return "listen:\n  - address: 127.0.0.1:8443\n" + strings.Join(lines, "\n") + "\n" + rest
	}
	cert := "      certificates: [{cert: a.pem, key: a.key}]"
	tests := []struct {
		name      string
		file      string
		line, col int
		path, msg string
	}{
		{"tls without certificates", listen("    tls: {min_version: \"1.3\"}"), 3, 10, "listen[0].tls.certificates", "missing; it is required, or acme to have certificates issued, or internal: true"},
		{"empty tls", listen("    tls:"), 3, 9, "listen[0].tls.certificates", "missing; it is required, or acme"},
		{"no certificate", listen("    tls: {certificates: []}"), 3, 25, "listen[0].tls.certificates", "at least one certificate"},
		{"certificate without key", listen("    tls: {certificates: [{cert: a.pem}]}"), 3, 26, "listen[0].tls.certificates[0].key", "missing"},
		{"empty cert path", listen("    tls: {certificates: [{cert: \"\", key: a.key}]}"), 3, 33, "listen[0].tls.certificates[0].cert", "must not be empty"},
		{"min_version 1.1", listen("    tls:", cert, "      min_version: \"1.1\""), 5, 20, "listen[0].tls.min_version", `unknown value "1.1"`},
		{"client_auth without ca", listen("    tls:", cert, "      client_auth: {mode: require}"), 5, 20, "listen[0].tls.client_auth.ca", "missing"},
		{"client_auth mode", listen("    tls:", cert, "      client_auth: {ca: ca.pem, mode: always}"), 5, 39, "listen[0].tls.client_auth.mode", `unknown value "always"`},
		{"acme without domains", listen("    tls:", cert, "      acme: {email: ops@example.com}"), 5, 13, "listen[0].tls.acme.domains", "missing; it is required"},
		{"acme, no domain", listen("    tls:", "      acme: {domains: []}"), 4, 23, "listen[0].tls.acme.domains", "at least one domain"},
		{"acme, a domain not a list", listen("    tls:", "      acme: {domains: example.com}"), 4, 23, "listen[0].tls.acme.domains", "must be a list"},
		{"acme, a wildcard", listen("    tls:", "      acme: {domains: [example.com, \"*.example.com\"]}"), 4, 37, "listen[0].tls.acme.domains[1]", "only the DNS-01 challenge"},
		{"acme, an IP address", listen("    tls:", "      acme: {domains: [192.0.2.1]}"), 4, 24, "listen[0].tls.acme.domains[0]", "is an IP address"},
		{"acme, not a name", listen("    tls:", "      acme: {domains: [exa_mple.com]}"), 4, 24, "listen[0].tls.acme.domains[0]", `'_' is not allowed`},
		{"acme, a domain twice", listen("    tls:", "      acme: {domains: [example.com, Example.COM.]}"), 4, 37, "listen[0].tls.acme.domains[1]", "example.com is listed twice"},
		{"acme, email", listen("    tls:", "      acme: {domains: [example.com], email: \"Ops <ops@example.com>\"}"), 4, 45, "listen[0].tls.acme.email", "not an email address"},
		{"acme, email without a domain", listen("    tls:", "      acme: {domains: [example.com], email: ops@localhost}"), 4, 45, "listen[0].tls.acme.email", "not an email address"},
		{"acme, ca over http", listen("    tls:", "      acme: {domains: [example.com], ca: \"http://ca.test/dir\"}"), 4, 42, "listen[0].tls.acme.ca", "not an https:// URL"},
		{"acme, empty storage", listen("    tls:", "      acme: {domains: [example.com], storage: \"\"}"), 4, 47, "listen[0].tls.acme.storage", "must not be empty"},
		{"acme, unknown key", listen("    tls:", "      acme: {domains: [example.com], emial: ops@example.com}"), 4, 38, "listen[0].tls.acme.emial", `did you mean "email"?`},
		{"acme redis storage without a redis section", listen("    tls:", "      acme: {domains: [example.com], storage: redis, storage_key_file: k}"), 4, 47, "listen[0].tls.acme.storage", "no top-level redis section"},
		{"acme redis storage without a key file", listen("    tls:", "      acme: {domains: [example.com], storage: \"redis://127.0.0.1:6379/2\"}"), 4, 13, "listen[0].tls.acme.storage_key_file", "missing; a Redis storage needs the key"},
		{"acme key file with a directory", listen("    tls:", "      acme: {domains: [example.com], storage: /var/acme, storage_key_file: k}"), 4, 13, "listen[0].tls.acme.storage_key_file", "is for a Redis storage"},
		{"acme bad redis URL", listen("    tls:", "      acme: {domains: [example.com], storage: \"redis://h:6379/db\", storage_key_file: k}"), 4, 47, "listen[0].tls.acme.storage", "not a Redis URL"},
		{"acme dns without a server", listen("    tls:", "      acme: {domains: [\"*.example.com\"], dns: {key_name: k, key_file: k.key}}"), 4, 47, "listen[0].tls.acme.dns.server", "missing; it is required, or exec"},
		{"acme dns, a server and exec", listen("    tls:", "      acme: {domains: [example.com], dns: {server: \"ns:53\", exec: /bin/hook}}"), 4, 43, "listen[0].tls.acme.dns.exec", "give one"},
		{"acme dns, exec with a key", listen("    tls:", "      acme: {domains: [example.com], dns: {exec: [/bin/hook], key_name: k, key_file: k.key}}"), 4, 43, "listen[0].tls.acme.dns.exec", "sends no updates"},
		{"acme dns, an empty exec", listen("    tls:", "      acme: {domains: [example.com], dns: {exec: []}}"), 4, 50, "listen[0].tls.acme.dns.exec", "must name the hook program"},
		{"acme dns, a server without a port", listen("    tls:", "      acme: {domains: [example.com], dns: {server: ns1.example.com}}"), 4, 52, "listen[0].tls.acme.dns.server", "not a host:port address"},
		{"acme dns, a key name without a file", listen("    tls:", "      acme: {domains: [example.com], dns: {server: \"ns:53\", key_name: k}}"), 4, 43, "listen[0].tls.acme.dns.key_file", "required with key_name"},
		{"acme dns, a key file without a name", listen("    tls:", "      acme: {domains: [example.com], dns: {server: \"ns:53\", key_file: k.key}}"), 4, 43, "listen[0].tls.acme.dns.key_name", "required with key_file"},
		{"acme dns, an algorithm", listen("    tls:", "      acme: {domains: [example.com], dns: {server: \"ns:53\", key_algorithm: hmac-md5}}"), 4, 76, "listen[0].tls.acme.dns.key_algorithm", "hmac-sha256"},
		{"acme dns, a resolver", listen("    tls:", "      acme: {domains: [example.com], dns: {server: \"ns:53\", resolvers: [1.1.1.1]}}"), 4, 73, "listen[0].tls.acme.dns.resolvers[0]", "not a host:port address"},
		{"acme dns, an unknown key", listen("    tls:", "      acme: {domains: [example.com], dns: {server: \"ns:53\", resolver: [\"ns:53\"]}}"), 4, 61, "listen[0].tls.acme.dns.resolver", `did you mean "resolvers"?`},
		{"internal with certificates", listen("    tls:", cert, "      internal: true"), 5, 17, "listen[0].tls.internal", "with certificates: give one"},
		{"internal with acme", listen("    tls:", "      acme: {domains: [example.com]}", "      internal: true"), 5, 17, "listen[0].tls.internal", "with acme: give one"},
		{"internal false alone", listen("    tls:", "      internal: false"), 4, 17, "listen[0].tls.internal", "is false, and there are no certificates"},
		{"internal yes", listen("    tls:", "      internal: yes"), 4, 17, "listen[0].tls.internal", `must be true or false, not "yes", or a mapping of the local CA's settings`},
		{"internal, a bad name", listen("    tls:", "      internal: {names: [app.test, \"bad name\"]}"), 4, 36, "listen[0].tls.internal.names[1]", "bad name is not a domain name or an IP address"},
		{"internal, a name twice", listen("    tls:", "      internal: {names: [app.test, App.Test.]}"), 4, 36, "listen[0].tls.internal.names[1]", "app.test is listed twice"},
		{"internal, names not a list", listen("    tls:", "      internal: {names: app.test}"), 4, 25, "listen[0].tls.internal.names", "must be a list, such as [app.test]"},
		{"internal, max_certificates 0", listen("    tls:", "      internal: {max_certificates: 0}"), 4, 36, "listen[0].tls.internal.max_certificates", "must be between 1 and 10000"},
		{"internal, empty storage", listen("    tls:", "      internal: {storage: \"\"}"), 4, 27, "listen[0].tls.internal.storage", "must not be empty"},
		{"internal, unknown key", listen("    tls:", "      internal: {name: [a.test]}"), 4, 18, "listen[0].tls.internal.name", `did you mean "names"?`},
		{"unknown tls key", listen("    tls:", cert, "      min_versoin: \"1.3\""), 5, 7, "listen[0].tls.min_versoin", `did you mean "min_version"?`},
		{"redirect on a TLS listener", listen("    tls:", cert, "    redirect_https: true"), 5, 21, "listen[0].redirect_https", "is for a plain listener"},
		{"https_port without redirect", listen("    https_port: 8443"), 3, 17, "listen[0].https_port", "only used with redirect_https"},
		{"h2 on a plain listener", listen("    protocols: [http/1.1, h2]"), 3, 16, "listen[0].protocols", "use h2c for cleartext HTTP/2"},
		{"h2c on a TLS listener", listen("    tls:", cert, "    protocols: [h2c]"), 5, 16, "listen[0].protocols", "this listener has tls; use h2"},
		{"a protocol twice", listen("    protocols: [h2c, h2c]"), 3, 22, "listen[0].protocols[1]", "h2c is listed twice"},
		{"h3 without tls", listen("    protocols: [h3, http/1.1]"), 3, 16, "listen[0].protocols", "QUIC, which has TLS built in"},
		{"h3 alone", listen("    tls:", cert, "    protocols: [h3]"), 5, 16, "listen[0].protocols", "needs h2 or http/1.1 beside it"},
		{"early data without h3", listen("    tls:", cert, "    early_data: safe"), 5, 17, "listen[0].early_data", "list h3 in protocols"},
		{"early data unknown", listen("    tls:", cert, "    protocols: [h3, h2]", "    early_data: all"), 6, 17, "listen[0].early_data", `unknown value "all"`},
		{"an unknown protocol", listen("    protocols: [h4]"), 3, 17, "listen[0].protocols[0]", `unknown value "h4"`},
		{"no protocol", listen("    protocols: []"), 3, 16, "listen[0].protocols", "at least one protocol"},
		{"h2 limits", listen() + "limits: {h2: {initial_window: 1KiB}}\n", 8, 31, "limits.h2.initial_window", "between 64KiB and 16MiB"},
		{"h2 upstream without tls", listen() + "    protocol: h2\n", 8, 15, "upstreams.web.protocol", "use h2c for cleartext HTTP/2"},
		{"h2c upstream with tls", listen() + "    protocol: h2c\n    tls: {}\n", 8, 15, "upstreams.web.protocol", "has tls; use h2"},
		{"https_port out of range", listen("    redirect_https: true", "    https_port: 70000"), 4, 17, "listen[0].https_port", "between 1 and 65535"},
		{"trusted not a list", listen() + "forwarded: {trusted: 10.0.0.0/8}\n", 8, 22, "forwarded.trusted", "must be a list"},
		{"trusted garbage", listen() + "forwarded: {trusted: [10.0.0.300/8]}\n", 8, 23, "forwarded.trusted[0]", "not an address or an address prefix"},
		{"trusted IPv4-mapped", listen() + "forwarded: {trusted: [\"::ffff:10.0.0.1\"]}\n", 8, 23, "forwarded.trusted[0]", "write IPv4 addresses as IPv4 (10.0.0.1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.file))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse: got error %v (%T), want an *Error", err, err)
			}
			if len(e.Problems) != 1 {
				t.Fatalf("got %d problems, want 1:\n%v", len(e.Problems), err)
			}
			p := e.Problems[0]
			if p.Line != tt.line || p.Column != tt.col || p.Path != tt.path || !strings.Contains(p.Msg, tt.msg) {
				t.Errorf("got  %#v\nwant line %d, column %d, path %q, message containing %q", p, tt.line, tt.col, tt.path, tt.msg)
			}
		})
	}
}

// Build reads the TLS files; every file that cannot be used is a problem
// naming the file, at its entry in the config, with the key at fault.
func TestBuildTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	siteCert, siteKey := ca.Server(t, "example.com").Write(t, dir, "site")
	_, otherKey := ca.Server(t, "other.test").Write(t, dir, "other")
	caFile := filepath.Join(dir, "clients.pem")
	tlstest.WriteFile(t, caFile, tlstest.NewCA(t, "clients").PEM)
	missing := filepath.Join(dir, "missing.pem")

	file := func(cert, key, clientCA string) string {
		s := "listen:\n  - address: 127.0.0.1:0\n  - address: 127.0.0.1:0\n    tls:\n      min_version: \"1.3\"\n" +
			"      certificates:\n        - {cert: " + siteCert + ", key: " + siteKey + "}\n" +
			"        - {cert: " + cert + ", key: " + key + "}\n"
		if clientCA != "" {
			s += "      client_auth: {ca: " + clientCA + ", mode: verify_if_given}\n"
		}
		return s + rest
	}
	build := func(yaml string) (*Generation, error) {
		cfg, err := Parse("t.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return Build(cfg)
	}

	g, err := build(file(siteCert, siteKey, caFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.TLS) != 2 || g.TLS[0] != nil || g.TLS[1] == nil {
		t.Fatalf("TLS settings %v, want none for the plain listener and some for the TLS one", g.TLS)
	}
	s := g.TLS[1]
	if s.MinVersion != tls.VersionTLS13 || s.ClientAuth != tls.VerifyClientCertIfGiven || s.ClientCAs == nil ||
		!reflect.DeepEqual(s.NextProtos, []string{"h2", "http/1.1"}) {
		t.Errorf("settings %+v", s)
	}
	if cert, _ := s.Certificates.GetCertificate(&tls.ClientHelloInfo{}); cert == nil || cert.Leaf.DNSNames[0] != "example.com" {
		t.Errorf("the default certificate is not the first")
	}

	tests := []struct {
		name          string
		cert, key, ca string
		problems      []string // each "line: path: file: reason"
	}{
		{"missing certificate", missing, siteKey, "", []string{
			"t.yaml:8: listen[1].tls.certificates[1].cert: " + missing + ": no such file or directory"}},
		{"another certificate's key", siteCert, otherKey, "", []string{
			"t.yaml:8: listen[1].tls.certificates[1].key: " + otherKey + ": not the private key of the certificate in " + siteCert}},
		{"swapped", siteKey, siteCert, "", []string{
			"t.yaml:8: listen[1].tls.certificates[1].cert: " + siteKey + ": holds a private key, not a certificate"}},
		{"missing CA and certificate: both told", missing, siteKey, missing, []string{
			"t.yaml:8: listen[1].tls.certificates[1].cert: " + missing + ": no such file or directory",
			"t.yaml:9: listen[1].tls.client_auth.ca: " + missing + ": no such file or directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := build(file(tt.cert, tt.key, tt.ca))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Build: got %v (%T), want an *Error", err, err)
			}
			if len(e.Problems) != len(tt.problems) {
				t.Fatalf("got %d problems, want %d:\n%v", len(e.Problems), len(tt.problems), err)
			}
			for i, p := range e.Problems {
				if !strings.HasPrefix(p.String(), tt.problems[i]) {
					t.Errorf("got  %s\nwant %s", p, tt.problems[i])
				}
			}
		})
	}
}

// A reload applies new TLS settings to the listeners that stay in the
// running server; what changes the listeners themselves needs a new
// server; only the pool's bound needs a restart.
func TestServerChanged(t *testing.T) {
	parse := func(listen, forwarded string) *Config {
		c, err := Parse("t.yaml", []byte("listen:\n"+listen+rest+forwarded))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tlsOne := "  - address: 127.0.0.1:8443\n    tls: {certificates: [{cert: a.pem, key: a.key}]}\n"
	tlsOther := "  - address: 127.0.0.1:8443\n    tls: {certificates: [{cert: b.pem, key: b.key}, {cert: c.pem, key: c.key}], min_version: \"1.3\", client_auth: {ca: ca.pem}}\n"
	plain := "  - address: 127.0.0.1:8443\n"
	redirect := "  - address: 127.0.0.1:8443\n    redirect_https: true\n"
	tests := []struct {
		name     string
		old, new *Config
		want     []string
	}{
		{"certificates, min_version, client_auth", parse(tlsOne, ""), parse(tlsOther, ""), nil},
		{"tls added", parse(plain, ""), parse(tlsOne, ""), []string{"listen"}},
		{"redirect added", parse(plain, ""), parse(redirect, ""), []string{"listen"}},
		{"another address", parse(tlsOne, ""), parse(strings.Replace(tlsOne, "8443", "9443", 1), ""), []string{"listen"}},
		{"trusted peers", parse(tlsOne, ""), parse(tlsOne, "forwarded: {trusted: [10.0.0.0/8]}\n"), []string{"forwarded"}},
		{"protocols", parse(tlsOne, ""), parse(tlsOne+"    protocols: [http/1.1]\n", ""), []string{"listen"}},
		{"timeouts, limits, logs", parse(plain, ""),
			parse(plain, "timeouts: {header: 3s}\nlimits: {max_headers: 50}\naccess_log: {format: json}\nlog: {level: debug}\n"),
			[]string{"timeouts", "limits", "access_log", "log"}},
	}
	for _, tt := range tests {
		if got := ServerChanged(tt.old, tt.new); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: ServerChanged %v, want %v", tt.name, got, tt.want)
		}
	}
	// The pool's bound is the shared pool's, which a reload sets: no new
	// server.
	old, bound := parse(plain, ""), parse(plain, "limits: {max_idle_upstream_conns: 5}\n")
	if got := ServerChanged(old, bound); got != nil {
		t.Errorf("pool bound: ServerChanged %v, want none", got)
	}
}

// Listeners: a redirect names https_port, else the first TLS listener's
// port as bound, else 443; a reload reaches the TLS listeners the new
// config keeps.
func TestListeners(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "example.com").Write(t, dir, "site")
	tlsListener := func(addr string) string {
		return "  - address: " + addr + "\n    tls: {certificates: [{cert: " + cert + ", key: " + key + "}]}\n"
	}
	build := func(listen string) (*Config, *Generation) {
		cfg, err := Parse("t.yaml", []byte("listen:\n"+listen+rest))
		if err != nil {
			t.Fatal(err)
		}
		g, err := Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cfg, g
	}
	bound := []net.Addr{&net.TCPAddr{Port: 8080}, &net.TCPAddr{Port: 8443}, &net.TCPAddr{Port: 9443}}
	tests := []struct {
		name   string
		listen string
		port   int
	}{
		{"the first TLS listener's port", "  - {address: 127.0.0.1:8080, redirect_https: true}\n" + tlsListener("127.0.0.1:8443") + tlsListener("127.0.0.1:9443"), 8443},
		{"https_port", "  - {address: 127.0.0.1:8080, redirect_https: true, https_port: 443}\n" + tlsListener("127.0.0.1:8443"), 443},
		{"no TLS listener: 443", "  - {address: 127.0.0.1:8080, redirect_https: true}\n", 443},
	}
	for _, tt := range tests {
		cfg, g := build(tt.listen)
		ls, err := NewListeners(cfg, g)
		if err != nil {
			t.Fatal(err)
		}
		o := ls.Options(0, bound)
		if rd, ok := o.Handler.(*proxy.RedirectHTTPS); !ok || rd.Port != tt.port || o.TLS != nil {
			t.Errorf("%s: options %+v, want a redirect to port %d", tt.name, o, tt.port)
		}
		if _, ok := o.Filter.(acme.HTTPChallenges); !ok {
			t.Errorf("%s: the plain listener does not answer ACME HTTP-01 challenges", tt.name)
		}
		if len(cfg.Listen) > 1 && ls.Options(1, bound).TLS == nil {
			t.Errorf("%s: the TLS listener has no TLS config", tt.name)
		}
	}

	cfg, g := build(tlsListener("127.0.0.1:8443") + tlsListener("127.0.0.1:9443") + "  - address: 127.0.0.1:8080\n")
	ls, err := NewListeners(cfg, g)
	if err != nil {
		t.Fatal(err)
	}
	// 9443 moved to the front, 8443 lost its tls, 8080 gained some.
	_, next := build(tlsListener("127.0.0.1:9443") + "  - address: 127.0.0.1:8443\n" + tlsListener("127.0.0.1:8080"))
	if got := ls.Reload(next); !reflect.DeepEqual(got, []string{"127.0.0.1:9443"}) {
		t.Errorf("reloaded %v, want only 127.0.0.1:9443", got)
	}
}

// An acme section needs only its domains; certificates are then optional.
func TestParseACMEDefaults(t *testing.T) {
	c, err := Parse("t.yaml", []byte("listen:\n  - address: 127.0.0.1:8443\n    tls:\n      acme: {domains: [Example.COM., www.example.com]}\n"+rest))
	if err != nil {
		t.Fatal(err)
	}
	want := &ACME{Domains: []string{"example.com", "www.example.com"}, Storage: "/var/lib/sluice/acme", Line: 4}
	if got := c.Listen[0].TLS; got.ACME == nil || !reflect.DeepEqual(got.ACME, want) || got.Certificates != nil {
		t.Errorf("got %+v with acme %+v, want acme %+v and no certificates", got, got.ACME, want)
	}
}

// Build makes one manager for each distinct acme section, not started,
// checks ca_root and storage, and offers acme-tls/1 on the listeners with
// acme. A reload carries a manager over where its section (the contents of
// ca_root included) stays, and Close stops only the managers not carried.
func TestBuildACME(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "private ACME CA")
	root := filepath.Join(dir, "acme-ca.pem")
	tlstest.WriteFile(t, root, ca.PEM)
	cert, key := ca.Server(t, "files.test").Write(t, dir, "site")
	storage := filepath.Join(dir, "acme")
	section := func(domains string) string {
		return "      acme: {domains: [" + domains + "], ca: \"https://127.0.0.1:1/dir\", ca_root: " + root + ", storage: " + storage + "}\n"
	}
	build := func(listen string) (*Config, *Generation, error) {
		cfg, err := Parse("t.yaml", []byte("listen:\n"+listen+rest))
		if err != nil {
			t.Fatal(err)
		}
		g, err := Build(cfg)
		return cfg, g, err
	}
	twoListeners := func(domains string) string {
		return "  - address: 127.0.0.1:0\n    tls:\n" + section(domains) +
			"  - address: 127.0.0.1:0\n    tls:\n      certificates: [{cert: " + cert + ", key: " + key + "}]\n" + section(domains) +
			"  - address: 127.0.0.1:0\n"
	}
	_, g, err := build(twoListeners("a.test"))
	if err != nil {
		t.Fatal(err)
	}
	if ms := g.ACME(); len(ms) != 1 {
		t.Fatalf("%d managers for two listeners with the same acme section, want 1", len(ms))
	}
	for i := range 2 {
		if s := g.TLS[i]; !reflect.DeepEqual(s.NextProtos, []string{"h2", "http/1.1", "acme-tls/1"}) || s.Certificates == nil {
			t.Errorf("listener %d: settings %+v", i, s)
		}
	}
	if g.Files[0] != nil || g.Files[1] == nil {
		t.Errorf("files: %v, want none for the first listener and the certificate for the second", g.Files)
	}
	// The files' certificate is served beside the manager, which has none.
	if c, err := g.TLS[1].Certificates.GetCertificate(&tls.ClientHelloInfo{ServerName: "files.test"}); err != nil || c.Leaf.DNSNames[0] != "files.test" {
		t.Errorf("the file's certificate beside acme: %v", err)
	}
	if _, err := g.TLS[0].Certificates.GetCertificate(&tls.ClientHelloInfo{ServerName: "a.test"}); err == nil {
		t.Error("a certificate served for a.test before the manager started")
	}

	_, same, err := build(twoListeners("a.test"))
	if err != nil {
		t.Fatal(err)
	}
	_, other, err := build(twoListeners("a.test, b.test"))
	if err != nil {
		t.Fatal(err)
	}
	m := g.ACME()[0]
	same.Carry(g)
	if ms := same.ACME(); len(ms) != 1 || ms[0] != m || len(g.ACME()) != 0 {
		t.Errorf("the same section: the manager was not carried over")
	}
	other.Carry(same)
	if ms := other.ACME(); len(ms) != 1 || ms[0] == m || len(same.ACME()) != 1 {
		t.Errorf("another section: a manager was carried over")
	}
	tlstest.WriteFile(t, root, tlstest.NewCA(t, "another CA").PEM)
	_, rooted, err := build(twoListeners("a.test"))
	if err != nil {
		t.Fatal(err)
	}
	rooted.Carry(same)
	if ms := rooted.ACME(); len(ms) != 1 || ms[0] == m {
		t.Errorf("ca_root's contents changed: the manager was carried over")
	}

	// Files that cannot be used are problems at the acme keys.
	notDir := filepath.Join(dir, "file")
	tlstest.WriteFile(t, notDir, []byte("x"))
	for _, tt := range []struct{ section, want string }{
		{"      acme: {domains: [a.test], ca_root: " + filepath.Join(dir, "missing.pem") + ", storage: " + storage + "}\n",
			"t.yaml:4: listen[0].tls.acme.ca_root: " + filepath.Join(dir, "missing.pem") + ": no such file or directory"},
		{"      acme: {domains: [a.test], ca_root: " + cert + ", storage: " + filepath.Join(notDir, "acme") + "}\n",
			"t.yaml:4: listen[0].tls.acme.storage: " + filepath.Join(notDir, "acme") + ": cannot be made: " + notDir + " is not a directory"},
	} {
		_, _, err := build("  - address: 127.0.0.1:0\n    tls:\n" + tt.section)
		var e *Error
		if !errors.As(err, &e) || len(e.Problems) != 1 || !strings.HasPrefix(e.Problems[0].String(), tt.want) {
			t.Errorf("got %v\nwant %s", err, tt.want)
		}
	}
}

// A Redis storage: the key file is read when the config is built, and its
// server comes from the redis section or the URL; a reload carries the
// manager over while neither the server nor the key changes.
func TestBuildACMERedis(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "storage.key")
	tlstest.WriteFile(t, keyFile, []byte("AwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISI=\n"))
	build := func(storage, keyFile, top string) (*Generation, error) {
		cfg, err := Parse("t.yaml", []byte("listen:\n  - address: 127.0.0.1:0\n    tls:\n      acme: {domains: [a.test], storage: \""+
			storage+"\", storage_key_file: "+keyFile+"}\n"+rest+top))
		if err != nil {
			t.Fatal(err)
		}
		return Build(cfg)
	}
	g, err := build("redis", keyFile, "redis: {address: \"10.0.0.7:6380\", password: pw, db: 3}\n")
	if err != nil {
		t.Fatal(err)
	}
	o := g.ACME()[0].Options()
	if r := o.Redis; r == nil || r.Options.Addr != "10.0.0.7:6380" || r.Options.Password != "pw" || r.Options.DB != 3 ||
		r.Key[0] != 3 || r.Key[31] != 34 || o.Storage != "" {
		t.Errorf("storage: redis: options %+v, redis %+v", o, o.Redis)
	}
	g2, err := build("rediss://:secret@cache.internal:6390/5", keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	if r := g2.ACME()[0].Options().Redis; r.Options.Addr != "cache.internal:6390" || r.Options.Password != "secret" ||
		r.Options.DB != 5 || r.Options.TLSConfig == nil {
		t.Errorf("a rediss:// URL: %+v", r.Options)
	}
	same, err := build("rediss://:secret@cache.internal:6390/5", keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	m2 := g2.ACME()[0]
	same.Carry(g2)
	if same.ACME()[0] != m2 || len(g2.ACME()) != 0 {
		t.Error("the same Redis storage: the manager was not carried over")
	}
	otherKey := filepath.Join(dir, "other.key")
	tlstest.WriteFile(t, otherKey, []byte(strings.Repeat("ab", 32)))
	rekeyed, err := build("rediss://:secret@cache.internal:6390/5", otherKey, "")
	if err != nil {
		t.Fatal(err)
	}
	m := same.ACME()[0]
	rekeyed.Carry(same)
	if rekeyed.ACME()[0] == m {
		t.Error("another storage key: the manager was carried over")
	}
	for _, tt := range []struct{ keyFile, want string }{
		{filepath.Join(dir, "missing.key"), "t.yaml:4: listen[0].tls.acme.storage_key_file: " + filepath.Join(dir, "missing.key") + ": no such file or directory"},
		{otherKey + "x", "no such file"},
	} {
		_, err := build("redis://127.0.0.1:6379", tt.keyFile, "")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("got %v\nwant %s", err, tt.want)
		}
	}
	short := filepath.Join(dir, "short.key")
	tlstest.WriteFile(t, short, []byte("c2hvcnQ="))
	if _, err := build("redis://127.0.0.1:6379", short, ""); err == nil || !strings.Contains(err.Error(), "listen[0].tls.acme.storage_key_file: "+short+": want 32 random bytes") {
		t.Errorf("a short key: %v", err)
	}
}

// acme.dns: the key file is read when the config is built, its secret
// alone or in tsig-keygen's key block; a missing or bad one is a problem at
// its key; propagation_timeout 0 does not wait; a wildcard is taken.
func TestBuildACMEDNS(t *testing.T) {
	dir := t.TempDir()
	plain, block := filepath.Join(dir, "plain.key"), filepath.Join(dir, "block.key")
	tlstest.WriteFile(t, plain, []byte("c2VjcmV0\n"))
	tlstest.WriteFile(t, block, []byte("key \"acme-update\" {\n\talgorithm hmac-sha512;\n\tsecret \"b3RoZXI=\";\n};\n"))
	hook := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	build := func(dns string) (*Generation, error) {
		t.Helper()
		cfg, err := Parse("t.yaml", []byte("listen:\n  - address: 127.0.0.1:0\n    tls:\n      acme: {domains: [\"*.a.test\", a.test], storage: "+dir+", dns: "+dns+"}\n"+rest))
		if err != nil {
			t.Fatal(err)
		}
		return Build(cfg)
	}
	for _, tt := range []struct {
		dns  string
		want acme.DNS
	}{
		{"{server: \"ns.a.test:53\", key_name: acme-update, key_file: " + plain + "}",
			acme.DNS{Server: "ns.a.test:53", KeyName: "acme-update", KeyAlgorithm: "hmac-sha256", Secret: "c2VjcmV0", PropagationTimeout: 2 * time.Minute}},
		{"{server: \"ns.a.test:53\", key_name: acme-update, key_algorithm: hmac-sha512, key_file: " + block + ", resolvers: [\"127.0.0.1:53\"], propagation_timeout: 0s, override_domain: a.acme.test}",
			acme.DNS{Server: "ns.a.test:53", KeyName: "acme-update", KeyAlgorithm: "hmac-sha512", Secret: "b3RoZXI=", Resolvers: []string{"127.0.0.1:53"}, PropagationTimeout: -1, OverrideDomain: "a.acme.test"}},
		{"{server: \"ns.a.test:53\"}",
			acme.DNS{Server: "ns.a.test:53", KeyAlgorithm: "hmac-sha256", PropagationTimeout: 2 * time.Minute}},
		{"{exec: " + hook + "}",
			acme.DNS{Exec: []string{hook}, KeyAlgorithm: "hmac-sha256", PropagationTimeout: 2 * time.Minute}},
		{"{exec: [" + hook + ", --zone, a.test]}",
			acme.DNS{Exec: []string{hook, "--zone", "a.test"}, KeyAlgorithm: "hmac-sha256", PropagationTimeout: 2 * time.Minute}},
	} {
		g, err := build(tt.dns)
		if err != nil {
			t.Fatalf("%s: %v", tt.dns, err)
		}
		ms := g.ACME()
		if len(ms) != 1 {
			t.Fatalf("%s: %d managers", tt.dns, len(ms))
		}
		if got := ms[0].Options().DNS; got == nil || !reflect.DeepEqual(*got, tt.want) {
			t.Errorf("%s: dns %+v, want %+v", tt.dns, got, tt.want)
		}
		if d := ms[0].Domains(); !slices.Equal(d, []string{"*.a.test", "a.test"}) {
			t.Errorf("%s: domains %v", tt.dns, d)
		}
	}
	bad := filepath.Join(dir, "bad.key")
	tlstest.WriteFile(t, bad, []byte("not base64!"))
	for _, tt := range []struct{ dns, want string }{
		{"{server: \"ns:53\", key_name: k, key_file: " + filepath.Join(dir, "missing.key") + "}", "listen[0].tls.acme.dns.key_file: " + filepath.Join(dir, "missing.key") + ": no such file"},
		{"{server: \"ns:53\", key_name: k, key_file: " + bad + "}", "listen[0].tls.acme.dns: key k: the secret is not base64"},
		{"{exec: " + filepath.Join(dir, "no-hook") + "}", "listen[0].tls.acme.dns.exec: exec: \"" + filepath.Join(dir, "no-hook") + "\": stat " + filepath.Join(dir, "no-hook") + ": no such file"},
		{"{exec: " + plain + "}", "listen[0].tls.acme.dns.exec: exec: \"" + plain + "\": permission denied"},
	} {
		_, err := build(tt.dns)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.dns, err, tt.want)
		}
	}
}

// StartACME points a manager at its TLS listener as bound, and at a plain
// listener bound to the same address, if any, for HTTP-01.
func TestStartACMEChallenges(t *testing.T) {
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	dir := t.TempDir()
	listen := "  - address: 127.0.0.1:0\n    tls:\n      acme: {domains: [a.test], ca: \"https://127.0.0.1:1/dir\", storage: " + dir + "}\n" +
		"  - address: 127.0.0.1:0\n"
	for _, tt := range []struct {
		plain net.Addr
		want  string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "challenges=\"[http-01 tls-alpn-01]\""},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 8080}, "challenges=[tls-alpn-01]"},
	} {
		logs.Reset()
		cfg, err := Parse("t.yaml", []byte("listen:\n"+listen+rest))
		if err != nil {
			t.Fatal(err)
		}
		g, err := Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := NewListeners(cfg, g)
		if err != nil {
			t.Fatal(err)
		}
		bound := []net.Addr{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8443}, tt.plain}
		if err := ls.StartACME(context.Background(), g, bound); err != nil {
			t.Fatal(err)
		}
		g.Close()
		if !strings.Contains(logs.String(), `msg="ACME certificates managed" domains=[a.test]`) || !strings.Contains(logs.String(), tt.want) {
			t.Errorf("plain listener %s: want %s in\n%s", tt.plain, tt.want, logs.String())
		}
	}
}

// TestBuildInternal: a listener's internal section makes a local CA whose
// names default to the routes' hosts, shared by the listeners with the
// same storage, which must then agree; Build checks the storage without
// making anything, OpenLocalCAs makes the root, and a client that trusts
// it verifies the listener's certificates.
func TestBuildInternal(t *testing.T) {
	dir := t.TempDir()
	storage := filepath.Join(dir, "pki")
	yaml := "listen:\n" +
		"  - address: 127.0.0.1:0\n    tls: {internal: {storage: " + storage + "}}\n" +
		"  - address: 127.0.0.1:0\n    tls: {internal: {storage: " + storage + "}}\n" +
		"routes:\n  - {host: App.Test, upstream: web}\n  - {host: \"*.apps.test\", upstream: web}\n  - {upstream: web}\n" +
		"upstreams:\n  web:\n    servers: [{address: \"127.0.0.1:9001\"}]\n"
	cfg, err := Parse("t.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	g, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(storage); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Build made the storage (%v): sluice validate must change nothing", err)
	}
	if len(g.localCAs) != 1 || g.TLS[0].Certificates != g.TLS[1].Certificates {
		t.Fatalf("%d local CAs for two listeners with one storage, want 1, shared", len(g.localCAs))
	}
	if got, want := g.localCAs[0].opts.Names, []string{"app.test", "*.apps.test"}; !slices.Equal(got, want) {
		t.Errorf("names %v, want the routes' hosts %v", got, want)
	}
	if err := g.OpenLocalCAs(); err != nil {
		t.Fatal(err)
	}
	ca := g.LocalCAs()[0]
	if ca.RootFile() != filepath.Join(storage, "root.crt") {
		t.Errorf("root file %s", ca.RootFile())
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Root())
	for _, name := range []string{"localhost", "app.test", "x.apps.test"} {
		c, err := g.TLS[0].Certificates.GetCertificate(&tls.ClientHelloInfo{ServerName: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// A second generation (a reload) opens the same CA.
	g2, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.OpenLocalCAs(); err != nil {
		t.Fatal(err)
	}
	if !g2.LocalCAs()[0].Root().Equal(ca.Root()) {
		t.Error("a second Build opened another root")
	}
}

// TestBuildInternalProblems: a storage that cannot be made, or holds a
// root that cannot be used, fails the build at the listener's internal
// section; so do two listeners that share a storage and differ on names.
func TestBuildInternalProblems(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	lonely := filepath.Join(dir, "lonely")
	os.MkdirAll(lonely, 0o700)
	os.WriteFile(filepath.Join(lonely, "root.key"), []byte("x"), 0o600)
	shared := filepath.Join(dir, "shared")
	tests := []struct {
		name, listen, want string
	}{
		{"storage under a file", "  - address: 127.0.0.1:0\n    tls:\n      internal: {storage: " + file + "/pki}\n",
			"t.yaml:4: listen[0].tls.internal.storage: " + file + "/pki: cannot be made: " + file + " is not a directory"},
		{"a key without its certificate", "  - address: 127.0.0.1:0\n    tls:\n      internal: {storage: " + lonely + "}\n",
			"t.yaml:4: listen[0].tls.internal.storage: " + filepath.Join(lonely, "root.key") + " is there without root.crt"},
		{"shared, names differ", "  - address: 127.0.0.1:0\n    tls:\n      internal: {storage: " + shared + "}\n" +
			"  - address: 127.0.0.1:0\n    tls:\n      internal: {storage: " + shared + ", names: [a.test]}\n",
			"t.yaml:7: listen[1].tls.internal: shares its storage " + shared + " with listen[0]"},
	}
	for _, tt := range tests {
		cfg, err := Parse("t.yaml", []byte("listen:\n"+tt.listen+rest))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		_, err = Build(cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Build: %v\nwant %s", tt.name, err, tt.want)
		}
	}
}
