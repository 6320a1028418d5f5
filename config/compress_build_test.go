package config_test

import (
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// TestBuildCompress checks that a route's compress mapping reaches the
// route as its phase: with min_size 2KiB, a 4 KiB JSON response is
// gzipped for a client that asks, a 1 KiB one is not, and a route without
// compress sends its responses as they are.
func TestBuildCompress(t *testing.T) {
	big, small := strings.Repeat(`{"k":"value"},`, 300), strings.Repeat("x", 1024)
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		body := big
		if strings.HasSuffix(r.Target, "/small") {
			body = small
		}
		c.Respond(200, body, upstreamtest.Field{Name: "Content-Type", Value: "application/json"})
	})
	yaml := "listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\n" +
		"routes:\n  - {path_prefix: /api/, upstream: app, compress: {algorithms: [gzip], min_size: 2KiB}}\n  - {upstream: app}\n" +
		"upstreams:\n  app:\n    servers: [{address: " + up.Addr() + "}]\n"
	addr, _ := serve(t, yaml, nil)
	for _, tt := range []struct {
		path, encoding, body string
	}{
		{"/api/big", "gzip", big},
		{"/api/small", "", small},
		{"/big", "", big},
	} {
		resp, body := proxytest.Do(t, addr, "GET "+tt.path+" HTTP/1.1\r\nHost: h\r\nAccept-Encoding: gzip\r\n\r\n")
		if got := resp.Header.Get("Content-Encoding"); got != tt.encoding {
			t.Errorf("%s: Content-Encoding %q, want %q", tt.path, got, tt.encoding)
			continue
		}
		if tt.encoding == "gzip" {
			zr, err := gzip.NewReader(strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			body = string(b)
		}
		if body != tt.body {
			t.Errorf("%s: body of %d bytes, want %d", tt.path, len(body), len(tt.body))
		}
	}
}
