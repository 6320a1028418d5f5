package main

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/config"
)

// dockerInstruction is one instruction of a Dockerfile, continuation
// lines joined.
type dockerInstruction struct {
	line int
	op   string // upper case: FROM, RUN, ...
	args string
}

func parseDockerfile(t *testing.T, path string) []dockerInstruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var list []dockerInstruction
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		op, args, _ := strings.Cut(cur.String(), " ")
		list = append(list, dockerInstruction{line: start, op: strings.ToUpper(op), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return list
}

// The Dockerfile builds a static binary and runs it from a minimal image
// as a user other than root: every FROM names a tag (not latest), the
// last is distroless static or scratch, the build has CGO_ENABLED=0, no
// ADD fetches a URL, the final stage sets a USER that is not root, EXPOSEs
// ports and runs sluice run on a config path it copies a valid config to.
func TestDockerfile(t *testing.T) {
	const root = "../.."
	list := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	var last int = -1
	for i, in := range list {
		switch in.op {
		case "FROM":
			image := strings.Fields(in.args)[0]
			name, tag, ok := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
			if !ok || tag == "" || tag == "latest" {
				t.Errorf("line %d: FROM %s: name a tag, not latest or none (%s)", in.line, image, name)
			}
			last = i
		case "ADD":
			if strings.Contains(in.args, "://") {
				t.Errorf("line %d: ADD of a URL: %s (fetch in a RUN with a checksum, or COPY)", in.line, in.args)
			}
		case "RUN":
			if strings.Contains(in.args, "go build") && !strings.Contains(in.args, "CGO_ENABLED=0") {
				t.Errorf("line %d: go build without CGO_ENABLED=0: %s", in.line, in.args)
			}
		}
	}
	if last < 0 {
		t.Fatal("no FROM")
	}
	final := strings.Fields(list[last].args)[0]
	if !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
		t.Errorf("the final image is %s, want distroless static or scratch", final)
	}
	var user, cmd, entry string
	var exposed bool
	copied := map[string]string{} // destination: source
	for _, in := range list[last:] {
		switch in.op {
		case "USER":
			user = in.args
		case "EXPOSE":
			exposed = true
		case "CMD":
			cmd = in.args
		case "ENTRYPOINT":
			entry = in.args
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) >= 2 && !strings.HasPrefix(f[0], "--") {
				copied[f[len(f)-1]] = f[0]
			}
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("the final stage runs as %q; want a USER other than root", user)
	}
	if !exposed {
		t.Error("no EXPOSE")
	}
	if !strings.Contains(entry, "sluice") || !strings.Contains(cmd, `"run"`) || !strings.Contains(cmd, `"-c"`) {
		t.Fatalf("ENTRYPOINT %s CMD %s: want sluice run -c FILE", entry, cmd)
	}
	// The default config: copied to the path CMD names, and valid.
	f := strings.Fields(strings.Trim(cmd, "[]"))
	path := strings.Trim(f[len(f)-1], `"`)
	src, ok := copied[path]
	if !ok {
		t.Fatalf("CMD names %s, which no COPY of the final stage puts there", path)
	}
	cfg, err := config.Load(filepath.Join(root, src))
	if err == nil {
		_, err = config.Build(cfg)
	}
	if err != nil {
		t.Errorf("the default config %s: %v", src, err)
	}
}

// CGO_ENABLED=0 go build ./cmd/sluice gives a static binary, the one the
// Dockerfile puts on an image without a C library.
func TestStaticBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	checkUnstampedVersion(t, bin)
	if runtime.GOOS != "linux" {
		return
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader (PT_INTERP): not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs %v", libs)
	}
	out, err := exec.Command(bin, "validate", "-c", "../../examples/docker/sluice.yaml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Errorf("the static binary's validate: %v: %s", err, out)
	}
}
