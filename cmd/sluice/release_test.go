package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// need returns the path of program, and skips the test when it is
// missing, unless CI=true, where it fails.
func need(t *testing.T, program, why string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required when CI=true (%s): %v", program, why, err)
		}
		t.Skipf("%s is missing (%s); skipping", program, why)
	}
	return p
}

// gitOut runs git in the repository and returns its output, trimmed; it
// skips the test outside a git checkout (a source archive), unless
// CI=true.
func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "TZ=UTC0")
	out, err := cmd.Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		t.Skipf("git %s: %v (not a git checkout?); skipping", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// TestRelease runs scripts/release for this machine's platform: the
// binary it builds says, in sluice version, the version git describe
// gives, the commit and the commit's time; it is packed with the README
// and the systemd unit, and SHA256SUMS holds the archive's digest.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	need(t, "bash", "runs scripts/release")
	need(t, "git", "scripts/release asks it for the version")
	need(t, "tar", "scripts/release packs the binary")
	version := gitOut(t, "describe", "--tags", "--always", "--dirty")
	commit := gitOut(t, "rev-parse", "HEAD")
	date := gitOut(t, "show", "-s", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", "HEAD")

	out := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("bash", "../../scripts/release", platform)
	cmd.Env = append(os.Environ(), "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release %s: %v\n%s", platform, err, b)
	}
	name := "sluice-" + version + "-" + runtime.GOOS + "-" + runtime.GOARCH
	got, err := exec.Command(filepath.Join(out, name, "sluice"), "version").Output()
	if err != nil {
		t.Fatalf("sluice version: %v", err)
	}
	want := "sluice " + version + "\nmodule   github.com/sluice-proxy/sluice\nrevision " + commit + "\ntime     " + date +
		"\ngo       " + runtime.Version() + " " + platform + "\n"
	if string(got) != want {
		t.Errorf("the release binary's sluice version:\n%s\nwant\n%s", got, want)
	}

	archive, err := os.ReadFile(filepath.Join(out, name+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(strings.NewReader(string(archive)))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, h.Name)
	}
	for _, f := range []string{name + "/sluice", name + "/README.md", name + "/sluice.service"} {
		if !slices.Contains(files, f) {
			t.Errorf("the archive holds %v, not %s", files, f)
		}
	}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(archive)
	if line := hex.EncodeToString(sum[:]) + "  " + name + ".tar.gz\n"; string(sums) != line {
		t.Errorf("SHA256SUMS holds %q, want %q", sums, line)
	}
}

// checkUnstampedVersion checks what sluice version says of bin, built by
// go build without the release script's stamp: a version (the go
// command's, or "(devel)"), and the revision it was built from when the go
// command embedded it (a git checkout, -buildvcs not false), which is
// then the checkout's HEAD, or "unknown": nothing untrue.
func checkUnstampedVersion(t *testing.T, bin string) {
	t.Helper()
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("sluice version: %v", err)
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "sluice ") || len(lines[0]) == len("sluice ") {
		t.Fatalf("sluice version:\n%s", out)
	}
	rev, ok := strings.CutPrefix(lines[2], "revision ")
	switch {
	case !ok:
		t.Fatalf("sluice version prints no revision:\n%s", out)
	case strings.HasPrefix(rev, "unknown ("):
		if v := strings.TrimPrefix(lines[0], "sluice "); v != "(devel)" && !strings.HasPrefix(v, "v") {
			t.Errorf("sluice version names version %q", v)
		}
	default:
		head := gitOut(t, "rev-parse", "HEAD")
		if strings.TrimSuffix(rev, "+modified") != head {
			t.Errorf("sluice version says revision %s; HEAD is %s", rev, head)
		}
	}
}
