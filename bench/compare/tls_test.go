package main

import (
	"cmp"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/config"
)

func TestExpandScenarios(t *testing.T) {
	tests := []struct {
		in, want []string
	}{
		{[]string{"small", "idle"}, []string{"small", "idle"}},
		{[]string{"tls"}, []string{"tls-small", "tls-close", "tls-resume", "tls-1m", "tls-idle"}},
		{[]string{"tls-close", "tls", "small"}, []string{"tls-close", "tls-small", "tls-resume", "tls-1m", "tls-idle", "small"}},
		{[]string{"plain"}, []string{"small", "16k", "1m", "post4k", "close", "logged", "idle"}},
		{[]string{"nosuch"}, []string{"nosuch"}},
	}
	for _, tt := range tests {
		if got := expandScenarios(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("expandScenarios(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := expandScenarios([]string{"all"}); len(got) != len(scenarios) {
		t.Errorf("all = %q, want every scenario", got)
	}
}

func TestParseFlagsScenarios(t *testing.T) {
	o, err := parseFlags([]string{"-scenarios", "small,tls"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"small", "tls-small", "tls-close", "tls-resume", "tls-1m", "tls-idle"}; !slices.Equal(o.scenarios, want) {
		t.Errorf("scenarios = %q, want %q", o.scenarios, want)
	}
	if _, err := parseFlags([]string{"-scenarios", "tls-nosuch"}); err == nil || !strings.Contains(err.Error(), "tls-resume") {
		t.Errorf("unknown scenario: err = %v, want one naming the known ones", err)
	}
	// The default run stays the plain set: the TLS scenarios are asked for.
	o, _ = parseFlags(nil)
	if slices.ContainsFunc(o.scenarios, func(n string) bool { return strings.HasPrefix(n, "tls") }) {
		t.Errorf("default scenarios %q include TLS ones", o.scenarios)
	}
}

func TestParseSClient(t *testing.T) {
	// openssl s_client -brief, OpenSSL 3.0, against nginx.
	out := `Can't use SSL_get_servername
depth=0 CN = bench.test
verify error:num=20:unable to get local issuer certificate
CONNECTION ESTABLISHED
Protocol version: TLSv1.3
Ciphersuite: TLS_AES_128_GCM_SHA256
Peer certificate: CN = bench.test
Hash used: SHA256
Signature type: ECDSA
Verification error: unable to get local issuer certificate
Server Temp Key: X25519, 253 bits
DONE
`
	got, err := parseSClient([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if want := (negotiated{protocol: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256", group: "X25519"}); got != want {
		t.Errorf("parseSClient = %+v, want %+v", got, want)
	}
	// A handshake that failed prints no such lines.
	failed := "40F7:error:0A00042E:SSL routines:ssl3_read_bytes:tlsv1 alert protocol version:ssl/record/rec_layer_s3.c:1586:SSL alert number 70\n"
	if n, err := parseSClient([]byte(failed)); err == nil {
		t.Errorf("a failed handshake: parseSClient = %+v, want an error", n)
	}
}

func TestParseTLSStates(t *testing.T) {
	out := "WRK-RESULT 3001500 3 420 0 0 0 0 0 2000 3000\n" +
		"TLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 full 64\n" +
		"TLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 resumed 9000\n"
	got, err := parseTLSStates([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if want := (negotiated{protocol: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256", group: "X25519", full: 64, resumed: 9000}); got != want {
		t.Errorf("parseTLSStates = %+v, want %+v", got, want)
	}
	bad := map[string]string{
		"none":          "WRK-RESULT 3001500 3 420 0 0 0 0 0 2000 3000\n",
		"two ciphers":   "TLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 full 1\nTLS-STATE TLSv1.3 TLS_AES_256_GCM_SHA384 X25519 full 1\n",
		"two groups":    "TLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 full 1\nTLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 X25519MLKEM768 full 1\n",
		"short":         "TLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 full 1\n",
		"bad count":     "TLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 full x\n",
		"neither kind":  "TLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 early 1\n",
		"negative kind": "TLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 full -1\n",
	}
	for name, out := range bad {
		if n, err := parseTLSStates([]byte(out)); err == nil {
			t.Errorf("%s: parseTLSStates = %+v, want an error", name, n)
		}
	}
}

func TestSumHandshakes(t *testing.T) {
	at := func(cipher string, full, resumed int64) sample {
		return sample{tls: negotiated{protocol: "TLSv1.3", cipher: cipher, group: "X25519", full: full, resumed: resumed}}
	}
	n, errText := sumHandshakes([]sample{at("A", 64, 100), at("A", 64, 200)})
	if errText != "" || n.full != 128 || n.resumed != 300 || n.cipher != "A" {
		t.Errorf("sumHandshakes = %+v, %q; want 128 full, 300 resumed, cipher A", n, errText)
	}
	if _, errText := sumHandshakes([]sample{at("A", 1, 0), at("B", 1, 0)}); errText == "" {
		t.Error("rounds that negotiated differently: no error")
	}
}

// The certificate is what every proxy serves: ECDSA P-256, for tlsName and
// 127.0.0.1 (wrk's SNI), signed by the run's CA; the key is not readable
// by others, and HAProxy's file is the certificate then its key.
func TestMakeTLSFiles(t *testing.T) {
	f, err := makeTLSFiles(filepath.Join(t.TempDir(), "tls"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf := pair.Leaf
	if k, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", leaf.PublicKey)
	}
	for _, name := range []string{tlsName, "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: f.roots, CurrentTime: time.Now()}); err != nil {
			t.Errorf("verifying for %s: %v", name, err)
		}
	}
	if st, err := os.Stat(f.key); err != nil || st.Mode().Perm()&0o077 != 0 {
		t.Errorf("key file mode %v, %v: want none for group and others", st.Mode(), err)
	}
	both, err := os.ReadFile(f.pem)
	if err != nil {
		t.Fatal(err)
	}
	first, rest := pem.Decode(both)
	second, _ := pem.Decode(rest)
	if first == nil || first.Type != "CERTIFICATE" || second == nil || second.Type != "PRIVATE KEY" {
		t.Fatalf("%s: want a CERTIFICATE then a PRIVATE KEY block", f.pem)
	}
	if _, err := tls.X509KeyPair(both, both); err != nil {
		t.Errorf("%s: %v", f.pem, err)
	}
}

// The sluice config of a TLS scenario is one sluice loads and builds: TLS
// 1.3 only, the run's certificate.
func TestSluiceTLSConfig(t *testing.T) {
	dir := t.TempDir()
	f, err := makeTLSFiles(filepath.Join(dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	s := site{dir: dir, port: 8443, upstream: "127.0.0.1:9000", binary: "/bin/sluice", tls: f}
	if _, _, err := sluiceConfig(s); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(dir, "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Listen) != 1 || cfg.Listen[0].TLS == nil {
		t.Fatalf("listeners %+v, want one with tls", cfg.Listen)
	}
	lt := cfg.Listen[0].TLS
	if lt.MinVersion != "1.3" || len(lt.Certificates) != 1 || lt.Certificates[0].Cert != f.cert || lt.Certificates[0].Key != f.key {
		t.Errorf("tls %+v, want min_version 1.3 and the run's certificate", lt)
	}
	if _, err := config.Build(cfg); err != nil {
		t.Errorf("Build: %v", err)
	}
}

// The other proxies' TLS configs, as the lines that make them serve the
// run's certificate with TLS 1.3 and the same cipher suite.
func TestTLSConfigs(t *testing.T) {
	f := &tlsFiles{cert: "/t/cert.pem", key: "/t/key.pem", pem: "/t/cert-and-key.pem"}
	tests := []struct {
		name      string
		configure func(site) ([]string, []string, error)
		file      string
		want      []string
	}{
		{"nginx", nginxConfig, "nginx.conf", []string{
			"listen 127.0.0.1:8443 ssl backlog=4096;",
			"ssl_certificate /t/cert.pem;",
			"ssl_certificate_key /t/key.pem;",
			"ssl_protocols TLSv1.3;",
			"ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;",
		}},
		{"haproxy", haproxyConfig, "haproxy.cfg", []string{
			"bind 127.0.0.1:8443 ssl crt /t/cert-and-key.pem\n",
			"ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256\n",
			"ssl-default-bind-options ssl-min-ver TLSv1.3\n",
		}},
		{"caddy", caddyConfig, "Caddyfile", []string{
			"https://:8443 {",
			"tls /t/cert.pem /t/key.pem {\n\t\tprotocols tls1.3\n\t}",
			"protocols h1 h2\n",
		}},
	}
	for _, tt := range tests {
		for _, withTLS := range []bool{false, true} {
			dir := t.TempDir()
			s := site{dir: dir, port: 8443, upstream: "127.0.0.1:9000", noFile: 20000, idleConns: 10000, binary: "/bin/" + tt.name}
			if withTLS {
				s.tls = f
			}
			if _, _, err := tt.configure(s); err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			b, err := os.ReadFile(filepath.Join(dir, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			conf := string(b)
			for _, line := range tt.want {
				if strings.Contains(conf, line) != withTLS {
					t.Errorf("%s, tls %v: %q in the config is %v:\n%s", tt.name, withTLS, line, !withTLS, conf)
				}
			}
			for _, word := range []string{"ssl", "tls"} {
				if !withTLS && strings.Contains(conf, word) {
					t.Errorf("%s without tls: %q in the config:\n%s", tt.name, word, conf)
				}
			}
		}
	}
	// go-relay takes the files as flags.
	argv, _, _ := relayConfig(site{port: 8443, upstream: "127.0.0.1:9000", binary: "/bin/relay", tls: f})
	if !slices.Equal(argv[len(argv)-4:], []string{"-cert", "/t/cert.pem", "-key", "/t/key.pem"}) {
		t.Errorf("go-relay argv %q, want -cert and -key at the end", argv)
	}
}

// The upstream speaks plain HTTP only: direct sits out the TLS scenarios,
// and go-relay both idle ones.
func TestSitsOut(t *testing.T) {
	tlsSmall, _ := scenarioByName("tls-small")
	tlsIdle, _ := scenarioByName("tls-idle")
	small, _ := scenarioByName("small")
	relay, _ := proxyByName("go-relay")
	nginx, _ := proxyByName("nginx")
	for _, tt := range []struct {
		p    proxy
		sc   scenario
		want bool
	}{
		{direct, small, false}, {direct, tlsSmall, true},
		{relay, tlsSmall, false}, {relay, tlsIdle, true},
		{nginx, tlsIdle, false},
	} {
		if got := tt.p.sitsOut(tt.sc); got != tt.want {
			t.Errorf("%s sits out %s: %v, want %v", tt.p.name, tt.sc.name, got, tt.want)
		}
	}
}

func TestKeepIdle(t *testing.T) {
	for settle, want := range map[time.Duration]time.Duration{
		2 * time.Second:   0, // each proxy's own timeout outlasts it
		30 * time.Second:  0,
		31 * time.Second:  91 * time.Second,
		130 * time.Second: 190 * time.Second,
	} {
		if got := keepIdle(settle); got != want {
			t.Errorf("keepIdle(%v) = %v, want %v", settle, got, want)
		}
	}
}

// With -idle-settle past the proxies' own idle timeouts, each config
// keeps idle client connections for longer; otherwise it says nothing.
func TestIdleTimeoutConfigs(t *testing.T) {
	tests := []struct {
		name      string
		configure func(site) ([]string, []string, error)
		file      string
		want      []string
	}{
		{"nginx", nginxConfig, "nginx.conf", []string{"    keepalive_timeout 190s;\n"}},
		{"haproxy", haproxyConfig, "haproxy.cfg", []string{"timeout client 190s\n", "timeout http-keep-alive 190s\n"}},
		{"caddy", caddyConfig, "Caddyfile", []string{"\tservers {\n\t\ttimeouts {\n\t\t\tidle 190s\n\t\t}\n\t}\n"}},
		{"sluice", sluiceConfig, "sluice.yaml", []string{"timeouts: {idle: 190s}\n"}},
	}
	for _, tt := range tests {
		for _, idle := range []time.Duration{0, 190 * time.Second} {
			dir := t.TempDir()
			s := site{dir: dir, port: 8443, upstream: "127.0.0.1:9000", noFile: 20000, idleConns: 10000, binary: "/bin/" + tt.name, idleTimeout: idle}
			if _, _, err := tt.configure(s); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range tt.want {
				if strings.Contains(string(b), line) != (idle > 0) {
					t.Errorf("%s, idle timeout %v: %q in the config is %v:\n%s", tt.name, idle, line, idle == 0, b)
				}
			}
			if tt.name == "sluice" {
				cfg, err := config.Load(filepath.Join(dir, tt.file))
				if err != nil {
					t.Fatal(err)
				}
				if want := cmp.Or(idle, time.Minute); cfg.Timeouts.Idle != want {
					t.Errorf("sluice, idle timeout %v: timeouts.idle = %v, want %v", idle, cfg.Timeouts.Idle, want)
				}
			}
		}
	}
}
