package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestDjangoExample runs the README's commands for
// examples/django/sluice.yaml as written: the sluice binary built, the
// Django project the tests use under gunicorn on a Unix socket, sluice run
// with the example file, curl trusting the local CA's root certificate
// that sluice logs, the redirect from plain HTTP, and sluice reload
// through the pid file. Only what would collide on a shared machine is
// moved to the test's own: the two ports, the socket, the pid file, and
// the CA's storage (STATE_DIRECTORY, as systemd would set it).
func TestDjangoExample(t *testing.T) {
	python := needGunicorn(t)
	needDjango(t, python)
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is required when CI=true")
		}
		t.Skip("curl is missing (Debian: apt-get install curl); skipping")
	}
	dir := t.TempDir()
	// A copy of the project, so that Python writes nothing in the tree.
	if err := os.CopyFS(filepath.Join(dir, "django"), os.DirFS("testdata/django")); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	example, err := os.ReadFile("../examples/django/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	plainAddr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	sock, pidFile := filepath.Join(dir, "shop.sock"), filepath.Join(dir, "sluice.pid")
	cfg := string(example)
	for _, r := range []struct{ old, new string }{
		{"127.0.0.1:8443", tlsAddr},
		{"127.0.0.1:8080", plainAddr},
		{"/tmp/shop-gunicorn.sock", sock},
		{"/tmp/sluice-shop.pid", pidFile},
		{"../../e2e/testdata/django/static", filepath.Join(dir, "django", "static")},
	} {
		if !strings.Contains(cfg, r.old) {
			t.Fatalf("the example no longer holds %s: change this test with it", r.old)
		}
		cfg = strings.ReplaceAll(cfg, r.old, r.new)
	}
	cfgPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	// python3 -m gunicorn --chdir e2e/testdata/django --bind unix:/tmp/shop-gunicorn.sock shop.wsgi:application &
	gunicorn := exec.Command(python, "-m", "gunicorn", "--chdir", filepath.Join(dir, "django"), "--bind", "unix:"+sock, "shop.wsgi:application")
	gunicorn.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	gunicorn.Stdout, gunicorn.Stderr = &LineWriter{Line: func(l string) { t.Log("gunicorn: " + l) }}, &LineWriter{Line: func(l string) { t.Log("gunicorn: " + l) }}
	gunicorn.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := gunicorn.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Kill(-gunicorn.Process.Pid, syscall.SIGTERM)
		gunicorn.Wait()
	}()
	wait.For(t, "gunicorn's socket", func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	// ./sluice run -c examples/django/sluice.yaml &
	var log lockedBuffer
	sluice := exec.Command(bin, "run", "-c", cfgPath)
	sluice.Env = append(os.Environ(), "STATE_DIRECTORY="+filepath.Join(dir, "state"))
	sluice.Stderr = &log
	sluice.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := sluice.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sluice.Wait() }()
	defer func() {
		sluice.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("sluice run: %v\n%s", err, log.String())
			}
		case <-time.After(40 * time.Second):
			sluice.Process.Kill()
			t.Errorf("sluice run did not stop after TERM:\n%s", log.String())
		}
	}()
	waitLog := func(re *regexp.Regexp, n int) []string {
		t.Helper()
		var m [][]string
		wait.For(t, fmt.Sprintf("%d lines matching %s", n, re), func() bool {
			m = re.FindAllStringSubmatch(log.String(), -1)
			return len(m) >= n
		})
		return m[n-1]
	}
	root := waitLog(regexp.MustCompile(`msg="local CA" root=(\S+) created=true`), 1)[1]
	if want := filepath.Join(dir, "state", "pki", "root.crt"); root != want {
		t.Errorf("the root is at %s, want %s", root, want)
	}
	waitLog(regexp.MustCompile(`msg=listening address=`), 2)

	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	_, plainPort, _ := net.SplitHostPort(plainAddr)
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s\nsluice's log:\n%s", name, strings.Join(args, " "), err, out, log.String())
		}
		return string(out)
	}
	// curl --cacert ~/.local/share/sluice/pki/root.crt https://localhost:8443/
	if page := run(curl, "-sS", "--cacert", root, "https://localhost:"+tlsPort+"/"); !strings.Contains(page, "<h1>shop</h1>") {
		t.Errorf("the page: %q", page)
	}
	head := run(curl, "-sS", "--cacert", root, "-I", "https://localhost:"+tlsPort+"/static/css/app.css")
	if !regexp.MustCompile(`^HTTP/\S+ 200`).MatchString(head) || !strings.Contains(strings.ToLower(head), "content-type: text/css") ||
		!strings.Contains(strings.ToLower(head), "x-frame-options: deny") {
		t.Errorf("the stylesheet:\n%s", head)
	}
	// curl -I http://localhost:8080/
	redirect := run(curl, "-sS", "-I", "http://localhost:"+plainPort+"/")
	if !strings.HasPrefix(redirect, "HTTP/1.1 308 Permanent Redirect\r\n") || !strings.Contains(redirect, "Location: https://localhost:"+tlsPort+"/\r\n") {
		t.Errorf("the redirect:\n%s", redirect)
	}
	// ./sluice reload -c examples/django/sluice.yaml
	run(bin, "reload", "-c", cfgPath)
	waitLog(regexp.MustCompile(`msg=reloaded`), 1)
	if page := run(curl, "-sS", "--cacert", root, "https://localhost:"+tlsPort+"/"); !strings.Contains(page, "<h1>shop</h1>") {
		t.Errorf("the page after the reload: %q", page)
	}
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("errors in sluice's log:\n%s", log.String())
	}
}
