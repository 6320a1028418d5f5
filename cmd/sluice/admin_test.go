//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-proxy/sluice/admin"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// adminRun is sluice run with an admin listener, on a goroutine of the
// test.
type adminRun struct {
	*sluiceRun
	proxy, admin string // addresses
}

// startAdminRun runs sluice run -c path, whose admin.address is set,
// until the test ends, and waits until it serves.
func startAdminRun(t *testing.T, path string) *adminRun {
	t.Helper()
	r := &sluiceRun{stderr: &proxytest.Buffer{}, done: make(chan int, 1)}
	go func() { r.done <- run([]string{"run", "-c", path}, &bytes.Buffer{}, r.stderr) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.stop(t)
		}
		if t.Failed() {
			t.Logf("sluice run's log:\n%s", r.stderr)
		}
	})
	adm := r.waitLog(t, regexp.MustCompile(`msg=admin address=(\S+)`), 1)[0][1]
	lst := r.waitLog(t, regexp.MustCompile(`msg=listening address=(\S+)`), 1)[0][1]
	return &adminRun{sluiceRun: r, proxy: lst, admin: adm}
}

// call sends a request to the admin listener and decodes a JSON answer
// into v (when not nil); it returns the status and the body.
func (r *adminRun) call(t *testing.T, method, path string, v any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+r.admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s %s: %v in %q", method, path, err, body)
		}
	}
	return resp.StatusCode, string(body)
}

// servers returns the servers of upstream app by address.
func (r *adminRun) servers(t *testing.T) (admin.Upstreams, map[string]admin.ServerState) {
	t.Helper()
	var u admin.Upstreams
	if code, body := r.call(t, "GET", "/api/upstreams", &u); code != 200 {
		t.Fatalf("/api/upstreams: %d %s", code, body)
	}
	out := map[string]admin.ServerState{}
	for _, up := range u.Upstreams {
		if up.Name == "app" {
			for _, s := range up.Servers {
				out[s.Address] = s
			}
		}
	}
	return u, out
}

// TestRunAdmin runs sluice run with an admin listener: liveness and
// readiness, the metrics, the config, and a server drained by hand that
// gets no request, stays drained across a reload (SIGHUP), and gets
// requests again once enabled.
func TestRunAdmin(t *testing.T) {
	a := upstreamtest.Start(t, upstreamtest.OK("a"))
	b := upstreamtest.Start(t, upstreamtest.OK("b"))
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	adminAddr, pprof := freeAddr(t), false
	write := func(comment string) {
		body := fmt.Sprintf("# %s\nlisten: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nadmin: {address: %s, pprof: %v}\n"+
			"routes: [{upstream: app}]\nupstreams:\n  app:\n    balance: round_robin\n    servers: [{address: %s}, {address: %s}]\n",
			comment, adminAddr, pprof, a.Addr(), b.Addr())
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	r := startAdminRun(t, path)
	get := func() string {
		code, body := proxytest.Get(t, r.proxy, "/", "")
		if code != 200 {
			t.Fatalf("through sluice: %d %s", code, body)
		}
		return body
	}

	if code, _ := r.call(t, "GET", "/live", nil); code != 200 {
		t.Fatalf("/live: %d", code)
	}
	var ready map[string]any
	if code, body := r.call(t, "GET", "/ready", &ready); code != 200 || ready["ready"] != true {
		t.Fatalf("/ready: %d %s", code, body)
	}
	if code, body := r.call(t, "GET", "/api/config", nil); code != 200 || !strings.Contains(body, `"address": "`+a.Addr()+`"`) {
		t.Fatalf("/api/config: %d %s", code, body)
	}
	u, _ := r.servers(t)
	firstHash := u.Config.Hash
	if len(firstHash) != 64 {
		t.Fatalf("config hash %q", firstHash)
	}

	// Drain b: every request goes to a.
	if code, body := r.call(t, "POST", "/api/upstreams/app/servers/"+b.Addr()+"/drain", nil); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	for range 6 {
		if got := get(); got != "a" {
			t.Fatalf("a request reached %q, drained", got)
		}
	}
	// A try is recorded once it ends, which may be just after its answer
	// reached the client.
	var ss map[string]admin.ServerState
	wait.For(t, "six tries recorded", func() bool {
		_, ss = r.servers(t)
		return ss[a.Addr()].Tries >= 6
	})
	if !ss[b.Addr()].Drained || ss[a.Addr()].Drained || ss[a.Addr()].Tries < 6 || ss[b.Addr()].Tries != 0 {
		t.Fatalf("after drain: a %+v, b %+v", ss[a.Addr()], ss[b.Addr()])
	}

	// A reload keeps b drained.
	write("second")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	r.waitLog(t, regexp.MustCompile(`msg=reloaded`), 1)
	u, ss = r.servers(t)
	if u.Config.Hash == firstHash {
		t.Error("the config hash did not change with the file")
	}
	if !ss[b.Addr()].Drained {
		t.Fatal("the reload undid the drain")
	}
	for range 4 {
		if got := get(); got != "a" {
			t.Fatalf("after the reload, a request reached %q, drained", got)
		}
	}

	// Both drained: not ready, and requests have no server.
	r.call(t, "POST", "/api/upstreams/app/servers/"+a.Addr()+"/drain", nil)
	if code, body := r.call(t, "GET", "/ready", &ready); code != 503 || !strings.Contains(body, "upstream app: no server takes requests (0 unhealthy, 2 drained)") {
		t.Fatalf("/ready with every server drained: %d %s", code, body)
	}
	resp, body := proxytest.Do(t, r.proxy, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if ps := resp.Header.Get("Proxy-Status"); resp.StatusCode != 503 || !strings.HasPrefix(ps, "sluice; error=destination_unavailable") {
		t.Fatalf("every server drained: %d, Proxy-Status %q, %s; want 503 destination_unavailable", resp.StatusCode, ps, body)
	}

	// Enabled, b takes requests again.
	r.call(t, "POST", "/api/upstreams/app/servers/"+a.Addr()+"/enable", nil)
	if code, body := r.call(t, "POST", "/api/upstreams/app/servers/"+b.Addr()+"/enable", nil); code != 200 {
		t.Fatalf("enable: %d %s", code, body)
	}
	seen := map[string]int{}
	for range 6 {
		seen[get()]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("after enable: %v, want both servers", seen)
	}

	code, metrics := r.call(t, "GET", "/metrics", nil)
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`sluice_config_reloads_total{result="success"} 1`,
		`sluice_config_info{hash="` + u.Config.Hash + `"} 1`,
		`sluice_config_load_timestamp_seconds `,
		`sluice_requests_in_flight `,
		`sluice_upstream_server_drained{server="` + b.Addr() + `",upstream="app"} 0`,
		`sluice_upstream_tries_total{outcome="ok",upstream="app"}`,
		`go_goroutines `,
		`process_open_fds `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code, _ := r.call(t, "GET", "/debug/pprof/", nil); code != 404 {
		t.Errorf("pprof off: /debug/pprof/ answered %d", code)
	}

	// A reload moves the admin listener and turns pprof on; the drain
	// state and the counts stay.
	oldAdmin := r.admin
	adminAddr, pprof = freeAddr(t), true
	write("third")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	r.waitLog(t, regexp.MustCompile(`msg=reloaded`), 2)
	r.admin = r.waitLog(t, regexp.MustCompile(`msg=admin address=(\S+)`), 2)[1][1]
	if r.admin != adminAddr {
		t.Fatalf("admin listener at %s after the reload, want %s", r.admin, adminAddr)
	}
	if code, _ := r.call(t, "GET", "/debug/pprof/", nil); code != 200 {
		t.Errorf("pprof on: /debug/pprof/ answered %d", code)
	}
	if _, err := http.Get("http://" + oldAdmin + "/live"); err == nil {
		t.Error("the old admin address still answers")
	}
	if _, ss := r.servers(t); ss[a.Addr()].Tries < 6 {
		t.Errorf("the move lost the counts: %+v", ss[a.Addr()])
	}

	if code, _ := r.call(t, "GET", "/api/upstreams/app/servers/"+b.Addr()+"/drain", nil); code != 405 {
		t.Errorf("GET drain: %d, want 405", code)
	}
	var e map[string]string
	if code, _ := r.call(t, "POST", "/api/upstreams/nope/servers/"+b.Addr()+"/drain", &e); code != 404 || e["error"] == "" {
		t.Errorf("unknown upstream: %d %v, want 404 with an error", code, e)
	}
}

// TestRunAdminToken: with admin.token_file, the admin listener asks for
// the token (but at /live), and a reload reads the file again: the new
// token works, the old one no longer does.
func TestRunAdminToken(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	path, tokenFile := filepath.Join(dir, "sluice.yaml"), filepath.Join(dir, "admin-token")
	const first, second = "first-token-0123456789", "second-token-0123456789"
	os.WriteFile(tokenFile, []byte(first+"\n"), 0o600)
	body := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nadmin: {address: %s, token_file: %s}\n"+
		"routes: [{upstream: app}]\nupstreams:\n  app:\n    servers: [{address: %s}]\n", freeAddr(t), tokenFile, up.Addr())
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startAdminRun(t, path)
	status := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+r.admin+"/api/upstreams", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code, _ := r.call(t, "GET", "/live", nil); code != 200 {
		t.Errorf("/live: %d, want 200 without the token", code)
	}
	if a, b := status(""), status(first); a != 401 || b != 200 {
		t.Errorf("without the token %d (want 401), with it %d (want 200)", a, b)
	}
	os.WriteFile(tokenFile, []byte(second+"\n"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	r.waitLog(t, regexp.MustCompile(`msg=reloaded`), 1)
	if a, b := status(first), status(second); a != 401 || b != 200 {
		t.Errorf("after the reload: the old token %d (want 401), the new one %d (want 200)", a, b)
	}
}
