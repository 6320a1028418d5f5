package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The files in testdata are h2load's (nghttp2 1.52) standard output of
// real runs, -c 16 -m 10 --npn-list=h2 against nginx 1.22 over TLS 1.3 unless
// named otherwise:
//
//   - h2load-nginx.txt: GET /small, answered 200 by nginx itself;
//   - h2load-302.txt: a location that answers 302;
//   - h2load-404-goaway.txt: a path that answers 404, with nginx's
//     keepalive_requests at its default, 1000, so that each connection is
//     sent GOAWAY and the streams past it reset (errored);
//   - h2load-no-alpn.txt: nginx without http2 on the listener, which
//     refuses every handshake of a client that offers h2 alone;
//   - h2load-http11.txt: -c 2 and h2load's default ALPN list against that
//     nginx, which settles on http/1.1.
func TestParseH2load(t *testing.T) {
	tls13 := negotiated{protocol: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256", group: "X25519", alpn: "h2"}
	tests := []struct {
		file string
		want loadResult
		// notH2 is what requireH2 must say of the run; "" for nothing.
		notH2 string
	}{
		{file: "h2load-nginx.txt", want: loadResult{
			wrkResult: wrkResult{duration: 2 * time.Second, requests: 127851, bytes: 11635225, p50: -1, p99: -1},
			tls:       tls13,
			h2: h2Result{done: 127851, succeeded: 127851, codes: [4]int64{127851, 0, 0, 0},
				reqMin: 185 * time.Microsecond, reqMax: 34340 * time.Microsecond, reqMean: 1770 * time.Microsecond, reqSD: 1750 * time.Microsecond,
				withinSDPct: 91.28},
		}},
		// 3xx is a success to h2load, an error here.
		{file: "h2load-302.txt", want: loadResult{
			wrkResult: wrkResult{duration: 2 * time.Second, requests: 16000, bytes: 3841056, status: 16000, p50: -1, p99: -1},
			tls:       tls13,
			h2: h2Result{done: 16000, succeeded: 16000, codes: [4]int64{0, 16000, 0, 0},
				reqMin: 295 * time.Microsecond, reqMax: 6710 * time.Microsecond, reqMean: 1370 * time.Microsecond, reqSD: 329 * time.Microsecond,
				withinSDPct: 95.05},
		}},
		// failed = 404s + errored; req/s leaves the errored out.
		{file: "h2load-404-goaway.txt", want: loadResult{
			wrkResult: wrkResult{duration: 2 * time.Second, requests: 16116, bytes: 3537056, sockErrs: 116, status: 16000, p50: -1, p99: -1},
			tls:       tls13,
			h2: h2Result{done: 16116, failed: 16116, errored: 116, codes: [4]int64{0, 0, 16000, 0},
				reqMin: 77 * time.Microsecond, reqMax: 8120 * time.Microsecond, reqMean: 2900 * time.Microsecond, reqSD: 782 * time.Microsecond,
				withinSDPct: 88.99},
		}},
		{file: "h2load-no-alpn.txt", notH2: "no TLS handshake completed", want: loadResult{
			wrkResult: wrkResult{duration: 2010 * time.Millisecond, p50: -1, p99: -1},
			h2:        h2Result{},
		}},
		{file: "h2load-http11.txt", notH2: `negotiated "http/1.1", not h2`, want: loadResult{
			wrkResult: wrkResult{duration: time.Second, requests: 100000, bytes: 17200000, p50: -1, p99: -1},
			tls:       negotiated{protocol: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256", group: "X25519", alpn: "http/1.1"},
			h2: h2Result{done: 100000, succeeded: 100000, codes: [4]int64{100000, 0, 0, 0},
				reqMin: 88 * time.Microsecond, reqMax: 1420 * time.Microsecond, reqMean: 198 * time.Microsecond, reqSD: 53 * time.Microsecond,
				withinSDPct: 83.42},
		}},
	}
	for _, tt := range tests {
		out, err := os.ReadFile(filepath.Join("testdata", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseH2load(out)
		if err != nil {
			t.Errorf("%s: %v", tt.file, err)
			continue
		}
		// The duration comes from a rate printed to 0.01 req/s.
		if d := got.duration - tt.want.duration; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: duration %v, want %v", tt.file, got.duration, tt.want.duration)
		}
		got.duration = tt.want.duration
		if got != tt.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.file, got, tt.want)
		}
		err = requireH2(got)
		switch {
		case tt.notH2 == "" && err != nil:
			t.Errorf("%s: requireH2: %v", tt.file, err)
		case tt.notH2 != "" && (err == nil || !strings.Contains(err.Error(), tt.notH2)):
			t.Errorf("%s: requireH2 = %v, want an error saying %q", tt.file, err, tt.notH2)
		}
	}
}

// h2 negotiated but nothing completed is no measurement either.
func TestRequireH2NoRequests(t *testing.T) {
	res := loadResult{tls: negotiated{protocol: "TLSv1.3", alpn: "h2"}}
	if err := requireH2(res); err == nil || !strings.Contains(err.Error(), "no request") {
		t.Errorf("requireH2 = %v, want no request completed", err)
	}
}

// Output cut short or changed is an error, never a row of zeros.
func TestParseH2loadBad(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "h2load-nginx.txt"))
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	bad := map[string]string{
		"empty":                     "",
		"killed before the summary": good[:strings.Index(good, "finished in")],
		"no time for request":       good[:strings.Index(good, "time for request")],
		"traffic in bytes":          strings.Replace(good, "11.10MB (11635225) total", "11635225 bytes total", 1),
		"a count not a number":      strings.Replace(good, "0 errored", "x errored", 1),
		"a count missing":           strings.Replace(good, ", 0 timeout", "", 1),
		"a class missing":           strings.Replace(good, ", 0 5xx", "", 1),
		"a time not a time":         strings.Replace(good, "1.77ms", "1.77", 1),
		"a time missing":            strings.Replace(good, "    91.28%", "", 1),
		"no req/s":                  strings.Replace(good, "63925.50 req/s", "63925.50", 1),
	}
	for name, out := range bad {
		if res, err := parseH2load([]byte(out)); err == nil {
			t.Errorf("%s: parseH2load = %+v, want an error", name, res)
		}
	}
}
