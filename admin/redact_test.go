package admin

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/config"
)

func TestConfigViewRedactsSecrets(t *testing.T) {
	cfg, err := config.Load("../config/testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(ConfigView(cfg))
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{`"admin":{"address":"unix:/run/sluice/admin.sock","mode":"0600","pprof":false,"token_file":"[redacted]"}`, `"mode":"0660"`, `"max_idle_upstream_conns":`,
		`"x_forwarded_for":true`, `"idle":"`, `"key":"/etc/`} {
		if !strings.Contains(s, want) {
			t.Errorf("config view lacks %s", want)
		}
	}
	if strings.Contains(s, `"line":`) {
		t.Error("config view has line numbers")
	}
	if strings.Contains(s, `"mode":"0000"`) {
		t.Error("config view has the mode of a TCP listener, which has none")
	}
}

func TestConfigViewRedaction(t *testing.T) {
	type eab struct {
		KeyID   string
		HMACKey string
	}
	type section struct {
		Password    string
		Token       []byte
		KeyFile     string // a path: shown
		Inline      string // key material in a field with an innocent name
		Storage     string // a URL with a password
		Plain       string // a URL without one: shown
		EAB         *eab
		Timeout     time.Duration
		Headers     map[string]string
		Now         func() time.Time // left out
		unexported  string
		Empty       string
		SecretCount int
	}
	v := section{
		Password: "hunter2", Token: []byte("zq-bytes"), KeyFile: "/etc/sluice/site.key",
		Inline:  "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n",
		Storage: "redis://:s3cr3t@cache:6379/2", Plain: "redis://ops@cache:6379",
		EAB:     &eab{KeyID: "kid-1", HMACKey: "c2VjcmV0"},
		Timeout: 1500 * time.Millisecond, Headers: map[string]string{"X-Api-Token": "t0k", "X-Name": "n"},
		Now: time.Now, unexported: "x", SecretCount: 3,
	}
	out, err := json.Marshal(ConfigView(v))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(out, &got)
	want := map[string]any{
		"password": Redacted, "token": Redacted, "key_file": "/etc/sluice/site.key", "inline": Redacted,
		"storage": Redacted, "plain": "redis://ops@cache:6379",
		"eab": map[string]any{"key_id": "kid-1", "hmac_key": Redacted}, "timeout": "1.5s",
		"headers": map[string]any{"X-Api-Token": Redacted, "X-Name": "n"}, "empty": "", "secret_count": Redacted,
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("view\n got %s\nwant %s", gotJSON, wantJSON)
	}
	for _, secret := range []string{"hunter2", "zq-bytes", "MIIB", "c2VjcmV0", "t0k", "s3cr3t"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("%q shown", secret)
		}
	}
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"MaxIdleUpstreamConns": "max_idle_upstream_conns", "HTTPSPort": "https_port", "XForwardedFor": "x_forwarded_for",
		"CARoot": "ca_root", "TLS": "tls", "H2": "h2", "Address": "address", "EAB": "eab", "HMACKey": "hmac_key",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}
