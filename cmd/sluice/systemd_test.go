package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const exampleUnit = "../../examples/systemd/sluice.service"

// parseUnit reads a systemd unit file: for each section, each key's
// values in order (a key may be given more than once), and the comments.
func parseUnit(t *testing.T, path string) (map[string]map[string][]string, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unit := map[string]map[string][]string{}
	var comments strings.Builder
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
			comments.WriteString(line + "\n")
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			unit[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
			}
			unit[section][k] = append(unit[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return unit, comments.String()
}

// The example unit runs sluice unprivileged and sandboxed as a
// Type=notify service with a reload and a note on binary upgrades; and
// systemd-analyze verify, where installed, finds nothing wrong with it.
func TestSystemdUnit(t *testing.T) {
	unit, comments := parseUnit(t, exampleUnit)
	svc := unit["Service"]
	if svc == nil {
		t.Fatal("no [Service] section")
	}
	want := map[string]string{
		"Type":                    "notify",
		"NotifyAccess":            "all",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
		"AmbientCapabilities":     "CAP_NET_BIND_SERVICE",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"SystemCallFilter":        "@system-service",
		"RuntimeDirectory":        "sluice",
	}
	for k, v := range want {
		if !slices.Contains(svc[k], v) {
			t.Errorf("[Service] %s=%q, want %s=%s", k, svc[k], k, v)
		}
	}
	if !slices.Contains(svc["DynamicUser"], "yes") && len(svc["User"]) == 0 {
		t.Error("runs as root: neither DynamicUser=yes nor User=")
	}
	if u := svc["User"]; len(u) > 0 && u[len(u)-1] == "root" {
		t.Error("User=root")
	}
	if start := svc["ExecStart"]; len(start) != 1 || !strings.Contains(start[0], "sluice run -c ") {
		t.Errorf("ExecStart=%q, want sluice run -c FILE", start)
	}
	if !slices.Contains(unit["Install"]["WantedBy"], "multi-user.target") {
		t.Error("[Install] WantedBy=multi-user.target missing")
	}
	for _, w := range []string{"USR2", "MAINPID", "sluice upgrade", "pid_file"} {
		if !strings.Contains(comments, w) {
			t.Errorf("the comments do not say how upgrades work under systemd (no %q)", w)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze not installed (Debian package systemd)")
		}
		t.Skip("systemd-analyze not installed (Debian package systemd); the unit's keys were checked, not verified")
	}
	// verify wants the commands to exist: the unit as installed, with this
	// test binary standing in for /usr/local/bin/sluice.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exampleUnit)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/sluice", self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
