package config_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestAccessLogBuffer serves a request with the access log in a file:
// buffered, the line reaches the file when its Resources close, not
// before; with buffer 0 it is there when the response is.
func TestAccessLogBuffer(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	for _, tt := range []struct {
		buffer string
		atOnce bool
	}{
		{"64KiB", false},
		{"0", true},
	} {
		t.Run("buffer "+tt.buffer, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "access.log")
			yaml := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\n"+
				"access_log: {path: %s, buffer: %s, flush: 1h}\n"+
				"routes: [{upstream: app}]\nupstreams:\n  app:\n    servers: [{address: %s}]\n", path, tt.buffer, up.Addr())
			addr, res := serve(t, yaml, nil)
			getThenSync(t, addr, "/logged") // the line is handed to the log
			logged := func() bool {
				b, _ := os.ReadFile(path)
				return strings.Contains(string(b), "target=/logged")
			}
			if tt.atOnce {
				if !logged() {
					t.Fatal("unbuffered: no access log line once the connection's next request was answered")
				}
				return
			}
			if logged() {
				t.Fatal("buffered (flush 1h): the line was written before the buffer filled or closed")
			}
			if err := res.Close(); err != nil {
				t.Fatal(err)
			}
			if !logged() {
				t.Fatal("buffered: the line is not in the file after Close")
			}
		})
	}
}

// getThenSync sends GET path and then GET /sync on one connection to addr:
// a request's line is logged after its response goes out, and before the
// connection's next request is served, so once /sync is answered path's
// line has been handed to the access log (/sync's own may be on either
// side).
func getThenSync(t *testing.T, addr, path string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: t\r\n\r\nGET /sync HTTP/1.1\r\nHost: t\r\n\r\n", path)
	br := bufio.NewReader(nc)
	for _, p := range []string{path, "/sync"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", p, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
}

// TestReopenLogs rotates the access log as logrotate does: the file is
// renamed, ReopenLogs is called, and the lines before go to the renamed
// file (the buffer is written there first), the lines after to a new file
// at the path.
func TestReopenLogs(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	yaml := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\n"+
		"access_log: {path: %s, flush: 1h}\n"+
		"routes: [{upstream: app}]\nupstreams:\n  app:\n    servers: [{address: %s}]\n", path, up.Addr())
	addr, res := serve(t, yaml, nil)
	getThenSync(t, addr, "/before")
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	if err := res.ReopenLogs(); err != nil {
		t.Fatal(err)
	}
	getThenSync(t, addr, "/after")
	if err := res.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ file, has, hasNot string }{
		{rotated, "target=/before", "target=/after"},
		{path, "target=/after", "target=/before"},
	} {
		b, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), f.has) || strings.Contains(string(b), f.hasNot) {
			t.Errorf("%s holds %q; want %s and not %s", filepath.Base(f.file), b, f.has, f.hasNot)
		}
	}

	// Off, or to standard error, there is nothing to reopen.
	_, res = serve(t, fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\n"+
		"routes: [{upstream: app}]\nupstreams:\n  app:\n    servers: [{address: %s}]\n", up.Addr()), nil)
	if err := res.ReopenLogs(); err != nil {
		t.Errorf("ReopenLogs with the access log on standard error: %v", err)
	}
}

// TestAccessLogRouteAndRequestID: the access log names the route and the
// upstream, and forwarded.request_id (on by default) puts an id in the
// response and the line; off, neither has one.
func TestAccessLogRouteAndRequestID(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	for _, tt := range []struct {
		forwarded string
		id        bool
	}{{"", true}, {"forwarded: {request_id: false}\n", false}} {
		path := filepath.Join(t.TempDir(), "access.log")
		yaml := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\n"+
			"access_log: {path: %s, buffer: 0}\n%s"+
			"routes: [{host: a.example, path_prefix: /v1/, upstream: app}, {upstream: app}]\n"+
			"upstreams:\n  app:\n    servers: [{address: %s}]\n", path, tt.forwarded, up.Addr())
		addr, res := serve(t, yaml, nil)
		resp, _ := proxytest.Do(t, addr, "GET /v1/x HTTP/1.1\r\nHost: a.example\r\n\r\n")
		id := resp.Header.Get("X-Request-Id")
		if (id != "") != tt.id {
			t.Errorf("request_id %v: response X-Request-Id %q", tt.id, id)
		}
		// The line is written once the answer went out (buffer 0: at
		// once), maybe after the client read it.
		var line string
		wait.For(t, "the access log line", func() bool {
			b, _ := os.ReadFile(path)
			line = string(b)
			return strings.HasSuffix(line, "\n")
		})
		res.Close()
		if !strings.Contains(line, " route=a.example/v1/ upstream_name=app ") {
			t.Errorf("line %q lacks route=a.example/v1/ upstream_name=app", line)
		}
		if tt.id != strings.Contains(line, " request_id="+id+" ") {
			t.Errorf("request_id %v: line %q", tt.id, line)
		}
	}
}
