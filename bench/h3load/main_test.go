package main

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/sluice-proxy/sluice/internal/tlstest"
)

// A run against quic-go's HTTP/3 server: every request answered 200 or
// 404 as the path says, counted so, and the summary in h2load's lines.
func TestRun(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	cert := ca.Server(t, "h3load.test")
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{*cert.TLS}}),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/small" {
				http.NotFound(w, r)
				return
			}
			w.Write([]byte("hello\n"))
		}),
	}
	go srv.Serve(pc)
	defer srv.Close()
	for _, tt := range []struct {
		path  string
		codes string
		fail  bool
	}{
		{"/small", `status codes: (\d+) 2xx, 0 3xx, 0 4xx, 0 5xx`, false},
		{"/missing", `status codes: 0 2xx, 0 3xx, (\d+) 4xx, 0 5xx`, true},
	} {
		u, _ := url.Parse("https://" + pc.LocalAddr().String() + tt.path)
		s, err := run(u, "h3load.test", 2, 3, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		s.print(&out, 300*time.Millisecond)
		sum := out.String()
		if s.done == 0 || s.errored != 0 {
			t.Fatalf("%s: %d done, %d errored:\n%s", tt.path, s.done, s.errored, sum)
		}
		m := regexp.MustCompile(tt.codes).FindStringSubmatch(sum)
		if m == nil || m[1] == "0" {
			t.Errorf("%s: no %s in:\n%s", tt.path, tt.codes, sum)
		}
		failed := regexp.MustCompile(`requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, 0 errored, 0 timeout`).FindStringSubmatch(sum)
		if failed == nil || (failed[3] == "0") == tt.fail || (failed[2] == "0") != tt.fail {
			t.Errorf("%s: requests line:\n%s", tt.path, sum)
		}
		for _, want := range []string{"TLS Protocol: TLSv1.3\n", "Application protocol: h3\n", " req/s, ", "time for request: "} {
			if !strings.Contains(sum, want) {
				t.Errorf("%s: no %q in:\n%s", tt.path, want, sum)
			}
		}
	}
}

// dur and size print as h2load does.
func TestFormats(t *testing.T) {
	for _, tt := range []struct {
		got, want string
	}{
		{dur(185 * time.Microsecond), "185us"}, {dur(34340 * time.Microsecond), "34.34ms"}, {dur(1200 * time.Millisecond), "1.20s"},
		{size(512), "512B"}, {size(6113), "5.97KB"}, {size(11635225), "11.10MB"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	lo, hi, mean, sd, within := spread([]time.Duration{1, 2, 3, 4, 5})
	if lo != 1 || hi != 5 || mean != 3 || sd != 1 || within != 60 {
		t.Errorf("spread: %v %v %v %v %v", lo, hi, mean, sd, within)
	}
}
