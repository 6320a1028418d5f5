package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// TestHelp: sluice --help (and -h, help) lists every command with its
// flags on stdout and exits 0; each command's -h or --help prints its own
// flags and exits 0, as does help COMMAND; an unknown command fails.
func TestHelp(t *testing.T) {
	every := []string{"run", "validate", "demo", "version", "help", "-c file", "-cpuprofile file", "-listen address", `(default "127.0.0.1:8080")`}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"-help"}, {"help", "help"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Errorf("sluice %q: exit %d, stderr %q", args, code, stderr.String())
		}
		for _, want := range every {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("sluice %q does not mention %q:\n%s", args, want, stdout.String())
			}
		}
	}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--help"}, []string{"usage: sluice run", "-c file", "-cpuprofile file"}},
		{[]string{"run", "-c", "x.yaml", "-h"}, []string{"usage: sluice run", "-c file"}},
		{[]string{"validate", "-h"}, []string{"usage: sluice validate", "-c file"}},
		{[]string{"demo", "--help"}, []string{"usage: sluice demo", "-listen address"}},
		{[]string{"version", "--help"}, []string{"usage: sluice version", "no flags"}},
		{[]string{"help", "demo"}, []string{"usage: sluice demo", "-listen address"}},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tt.args, &stdout, &stderr); code != 0 {
			t.Errorf("sluice %q: exit %d, stderr %q", tt.args, code, stderr.String())
		}
		for _, want := range tt.want {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("sluice %q does not print %q:\n%s", tt.args, want, stdout.String())
			}
		}
		if strings.Contains(stdout.String(), "Usage of") {
			t.Errorf("sluice %q prints the flag package's own heading:\n%s", tt.args, stdout.String())
		}
	}
	for _, args := range [][]string{{"bogus", "-h"}, {"help", "bogus"}, {"bogus"}, {}, {"version", "extra"}, {"version", "-x"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("sluice %q: exit %d, want 2", args, code)
		}
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"sluice ", "module ", "revision ", runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("sluice version does not print %q:\n%s", want, stdout.String())
		}
	}

	bi := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/sluice-proxy/sluice", Version: "v0.0.0-20261201055554-996d15758156"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "996d15758156ff0676f14f08443827661054887b"},
			{Key: "vcs.time", Value: "2026-12-01T05:55:54Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	devel := &debug.BuildInfo{Main: debug.Module{Path: "github.com/sluice-proxy/sluice", Version: "(devel)"}}
	release := buildInfo{Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2027-01-02T03:04:05Z"}
	for _, tt := range []struct {
		name    string
		bi      *debug.BuildInfo
		stamped buildInfo
		want    string
	}{
		{"go build in a git checkout", bi, buildInfo{}, "sluice v0.0.0-20261201055554-996d15758156\nmodule   github.com/sluice-proxy/sluice\n" +
			"revision 996d15758156ff0676f14f08443827661054887b+modified\ntime     2026-12-01T05:55:54Z\ngo       go1.26.0 linux/amd64\n"},
		{"version stamped alone", bi, buildInfo{Version: "v1.2.3"}, "sluice v1.2.3\nmodule   github.com/sluice-proxy/sluice\n" +
			"revision 996d15758156ff0676f14f08443827661054887b+modified\ntime     2026-12-01T05:55:54Z\ngo       go1.26.0 linux/amd64\n"},
		{"release build", devel, release, "sluice v1.2.3\nmodule   github.com/sluice-proxy/sluice\n" +
			"revision 0123456789abcdef0123456789abcdef01234567\ntime     2027-01-02T03:04:05Z\ngo       go1.26.0 linux/amd64\n"},
		{"release build, VCS info too", bi, release, "sluice v1.2.3\nmodule   github.com/sluice-proxy/sluice\n" +
			"revision 0123456789abcdef0123456789abcdef01234567\ntime     2027-01-02T03:04:05Z\ngo       go1.26.0 linux/amd64\n"},
		{"go build without VCS info", devel, buildInfo{}, "sluice (devel)\nmodule   github.com/sluice-proxy/sluice\n" +
			"revision unknown (built outside a git checkout, or with -buildvcs=false)\ngo       go1.26.0 linux/amd64\n"},
		{"no build info", nil, buildInfo{}, "sluice (devel)\nmodule   unknown\n" +
			"revision unknown (built outside a git checkout, or with -buildvcs=false)\ngo       go1.26.0 linux/amd64\n"},
	} {
		if got := readBuild(tt.bi, tt.stamped, "go1.26.0", "linux/amd64").String(); got != tt.want {
			t.Errorf("%s:\n%s\nwant\n%s", tt.name, got, tt.want)
		}
	}
}

// TestRunLogsVersion: the start's log line names the version sluice
// version prints, never an empty one.
func TestRunLogsVersion(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	body := "listen: [{address: " + taken.Addr().String() + "}]\nroutes: [{upstream: app}]\nupstreams: {app: {servers: [{address: 127.0.0.1:9}]}}\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	run([]string{"run", "-c", path}, &stdout, &stderr) // fails to bind, after the line
	v := currentBuild().Version
	if v == "" {
		t.Fatal("currentBuild has no version")
	}
	m := regexp.MustCompile(`msg="sluice run" version=("(?:[^"\\]|\\.)*"|\S+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no start line with a version:\n%s", stderr.String())
	}
	logged := m[1]
	if uq, err := strconv.Unquote(logged); err == nil {
		logged = uq
	}
	if logged != v {
		t.Errorf("the start's log line says version %q, want %q:\n%s", logged, v, stderr.String())
	}
	stdout.Reset()
	run([]string{"version"}, &stdout, &stderr)
	if first, _, _ := strings.Cut(stdout.String(), "\n"); first != "sluice "+v {
		t.Errorf("sluice version says %q, the log %s", first, v)
	}
}
