package config_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestAccessLogBuffer serves a request with the access log in a file:
// buffered, the line reaches the file when the server's closer runs, not
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
			cfg, err := config.Parse("t.yaml", []byte(yaml))
			if err != nil {
				t.Fatal(err)
			}
			gen, err := config.Build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			gen.Start(ctx)
			defer gen.Close()
			srv, closer, err := config.NewServer(cfg, gen, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			addr := proxytest.Serve(t, srv)
			resp, _ := proxytest.Do(t, addr, "GET /logged HTTP/1.1\r\nHost: t\r\n\r\n")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			logged := func() bool {
				b, _ := os.ReadFile(path)
				return strings.Contains(string(b), "target=/logged")
			}
			if tt.atOnce {
				for i := 0; !logged(); i++ {
					if i == 100 {
						t.Fatal("unbuffered: no access log line 1 s after the response")
					}
					time.Sleep(10 * time.Millisecond)
				}
				return
			}
			time.Sleep(20 * time.Millisecond)
			if logged() {
				t.Fatal("buffered (flush 1h): the line was written before the buffer filled or closed")
			}
			if err := closer.Close(); err != nil {
				t.Fatal(err)
			}
			if !logged() {
				t.Fatal("buffered: the line is not in the file after Close")
			}
		})
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
	cfg, err := config.Parse("t.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := config.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gen.Start(ctx)
	defer gen.Close()
	srv, res, err := config.NewServer(cfg, gen, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr := proxytest.Serve(t, srv)
	get := func(path string) {
		if resp, _ := proxytest.Do(t, addr, "GET "+path+" HTTP/1.1\r\nHost: t\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("GET %s: status %d", path, resp.StatusCode)
		}
	}
	get("/before")
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	if err := res.ReopenLogs(); err != nil {
		t.Fatal(err)
	}
	get("/after")
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
	cfg.AccessLog.Path = ""
	_, res, err = config.NewServer(cfg, gen, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if err := res.ReopenLogs(); err != nil {
		t.Errorf("ReopenLogs with the access log on standard error: %v", err)
	}
}
