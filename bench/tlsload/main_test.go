package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/tlstest"
)

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range xs {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	tests := []struct {
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 0.99, 10 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 0.5, 5 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.ds, tt.p); got != tt.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tt.ds, tt.p, got, tt.want)
		}
	}
}

func TestPrint(t *testing.T) {
	r := &result{
		duration: 3*time.Second + 1500*time.Microsecond, requests: 3, bytes: 420,
		connect: 1, read: 2, write: 3, status: 4, timeout: 5,
		latencies: []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond},
		states: map[state]int64{
			{tls.VersionTLS13, tls.TLS_AES_128_GCM_SHA256, tls.X25519, true}:  2,
			{tls.VersionTLS13, tls.TLS_AES_128_GCM_SHA256, tls.X25519, false}: 1,
		},
	}
	var b bytes.Buffer
	r.print(&b)
	want := "WRK-RESULT 3001500 3 420 1 2 3 4 5 2000 3000\n" +
		"TLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 full 1\n" +
		"TLS-STATE TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 resumed 2\n"
	if b.String() != want {
		t.Errorf("print:\n%s\nwant:\n%s", b.String(), want)
	}
}

// Against a TLS 1.3 server: without -resume every handshake is full, with
// it every one after a client's first resumes. Each client makes three
// exchanges (-n), however slow the machine; the duration only bounds a
// test that is failing.
func TestLoad(t *testing.T) {
	ca := tlstest.NewCA(t, "tlsload CA")
	leaf := ca.Server(t, "bench.test")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "bench.test" || !r.Close {
			http.Error(w, "want Host bench.test and Connection: close", http.StatusBadRequest)
			return
		}
		io.WriteString(w, "hello\n")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf.TLS}, MinVersion: tls.VersionTLS13}
	srv.StartTLS()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")
	for _, resume := range []bool{false, true} {
		o := options{addr: addr, path: "/small", serverName: "bench.test", conns: 4, duration: time.Minute, perClient: 3, timeout: 5 * time.Second, resume: resume}
		r := load(o)
		if r.requests != 12 || r.connect+r.read+r.write+r.status+r.timeout > 0 {
			t.Fatalf("resume %v: %d exchanges, errors %+v; first: %v", resume, r.requests, r, r.firstErr)
		}
		if len(r.latencies) != int(r.requests) || r.bytes < r.requests*int64(len("HTTP/1.1 200 OK\r\n\r\nhello\n")) {
			t.Errorf("resume %v: %d latencies, %d bytes for %d exchanges", resume, len(r.latencies), r.bytes, r.requests)
		}
		var full, resumed int64
		for s, n := range r.states {
			if s.version != tls.VersionTLS13 || s.group != tls.X25519 {
				t.Errorf("resume %v: negotiated %s", resume, s)
			}
			if s.resumed {
				resumed += n
			} else {
				full += n
			}
		}
		want := r.requests
		if resume {
			want = int64(o.conns)
		}
		if full != want || full+resumed != r.requests {
			t.Errorf("resume %v: %d full and %d resumed handshakes for %d exchanges, want %d full", resume, full, resumed, r.requests, want)
		}
	}
}
