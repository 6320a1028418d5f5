package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/e2e"
)

// nginxConf is the configuration of seed 004, everything under the prefix
// directory: one worker, an upstream block with 32 keep-alive connections,
// HTTP/1.1 to the upstream with the Connection field cleared, and the
// default proxy_next_upstream (error timeout). The access log records what
// nginx did with each request id: $upstream_status lists every try.
const nginxConf = `daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
    log_format churn '$http_x_request_id $request_method $status "$upstream_status"';
    access_log %[1]s/access.log churn;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    upstream app {
        server %[2]s;
        keepalive 32;
    }
    server {
        listen %[3]s;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
`

// nginx is an nginx master process run in the foreground.
type nginx struct {
	Addr string
	dir  string
	cmd  *exec.Cmd
	stop context.CancelFunc
	done chan struct{}
}

// startNginx runs bin with its prefix, configuration, pid and logs in dir,
// proxying to upstream, and returns once it answers through to the app.
func startNginx(ctx context.Context, bin, dir, upstream string) (*nginx, error) {
	addr, err := e2e.FreeAddr()
	if err != nil {
		return nil, err
	}
	// Workers run as nobody when the master is root: let them in.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, upstream, addr), 0o644); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	cmd := exec.CommandContext(runCtx, bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out, err := os.Create(filepath.Join(dir, "nginx.out"))
	if err != nil {
		stop()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		stop()
		out.Close()
		return nil, err
	}
	n := &nginx{Addr: addr, dir: dir, cmd: cmd, stop: stop, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		out.Close()
		close(n.done)
	}()
	if err := waitReady(ctx, addr, n.done); err != nil {
		n.Stop()
		b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return nil, fmt.Errorf("nginx: %w\n%s", err, b)
	}
	return n, nil
}

// Stop stops nginx (SIGTERM to its process group, SIGKILL after 5 s) and
// waits for it. It may be called more than once.
func (n *nginx) Stop() {
	n.stop()
	<-n.done
	syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
}

// Retried counts, by method, the requests nginx tried more than once (its
// access log's $upstream_status lists one status per try).
func (n *nginx) Retried() (map[string]int, error) {
	f, err := os.Open(filepath.Join(n.dir, "access.log"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	retried := make(map[string]int)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 4)
		if len(fields) == 4 && strings.Contains(fields[3], ",") {
			retried[fields[1]]++
		}
	}
	return retried, sc.Err()
}

// errorLine matches an nginx error log line about one request, capturing
// its level and message.
var errorLine = regexp.MustCompile(`^\S+ \S+ \[(\w+)\] \d+#\d+: \*\d+ (.*?), client: `)

// Errors counts the error log lines about requests by method, level and
// message, as sorted lines "POST error recv() failed (104: Connection reset
// by peer) while reading response header from upstream: 3".
func (n *nginx) Errors() ([]string, error) {
	b, err := os.ReadFile(filepath.Join(n.dir, "error.log"))
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int)
	for line := range strings.Lines(string(b)) {
		m := errorLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		method := "?"
		if _, req, ok := strings.Cut(line, `request: "`); ok {
			method, _, _ = strings.Cut(req, " ")
		}
		counts[method+" "+m[1]+" "+m[2]]++
	}
	out := make([]string, 0, len(counts))
	for k, v := range counts {
		out = append(out, fmt.Sprintf("%s: %d", k, v))
	}
	slices.Sort(out)
	return out, nil
}

// copyFile copies the named file to w, for -v.
func copyFile(w io.Writer, name string) {
	f, err := os.Open(name)
	if err != nil {
		return
	}
	defer f.Close()
	io.Copy(w, f)
}
