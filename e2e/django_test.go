package e2e

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// needDjango skips the test when python cannot import Django, unless
// CI=true, where a missing Django fails it.
func needDjango(t *testing.T, python string) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import django").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Django is required when CI=true: %v: %s", err, out)
		}
		t.Skipf("Django is missing (Debian: apt-get install python3-django); skipping: %v", err)
	}
}

// djangoConfig is the README's config for a Django site: sluice serves
// /static/ (what collectstatic gathered) itself, rate-limits the API,
// compresses, and puts security headers on every answer, the files and
// its own errors included.
const djangoConfig = `listen:
  - address: 127.0.0.1:0
access_log: {enabled: false}
routes:
  - path_prefix: /static/
    static: {root: %[1]s, cache_control: "max-age=3600"}
    headers: {response: {set: %[3]s}}
  - path_prefix: /api/
    upstream: django
    rate_limit: {rate: 5/s, burst: 5}
    compress: {}
    headers: {response: {set: %[3]s, remove: [Server]}}
  - upstream: django
    compress: {}
    limits: {body: 1MiB}
    headers: {response: {set: %[3]s, remove: [Server]}}
upstreams:
  django:
    servers: [{address: %[2]s}]
`

const securityHeaders = `{Strict-Transport-Security: "max-age=31536000", X-Frame-Options: DENY, Referrer-Policy: same-origin}`

// TestDjango puts sluice in front of a Django project served by gunicorn,
// in place of the nginx usually there: static files, a rate-limited and
// compressed API, security headers, a body limit.
func TestDjango(t *testing.T) {
	python := needGunicorn(t)
	needDjango(t, python)
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/django")); err != nil {
		t.Fatal(err)
	}
	css, err := os.ReadFile(filepath.Join(dir, "static/css/app.css"))
	if err != nil {
		t.Fatal(err)
	}
	// What a build step makes beside the file, for gzip_static-style serving.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(css)
	zw.Close()
	if err := os.WriteFile(filepath.Join(dir, "static/css/app.css.gz"), gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	g, err := StartGunicorn(t.Context(), GunicornOptions{Python: python, Dir: dir, WSGI: "shop.wsgi:application",
		MaxRequests: -1, Log: &LineWriter{Line: func(l string) { t.Log(l) }}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	s, err := StartSluice(fmt.Sprintf(djangoConfig, filepath.Join(dir, "static"), g.Addr, securityHeaders), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}
	get := func(path string, header ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+s.Addr+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: reading the body: %v", path, err)
		}
		return resp, body
	}
	secure := func(what string, resp *http.Response) {
		t.Helper()
		if resp.Header.Get("Strict-Transport-Security") == "" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: no security headers in %v", what, resp.Header)
		}
	}

	// The page, from Django, without gunicorn's Server field.
	resp, body := get("/")
	if resp.StatusCode != 200 || !strings.Contains(string(body), "<h1>shop</h1>") {
		t.Fatalf("GET /: %d %q", resp.StatusCode, body)
	}
	secure("the page", resp)
	if srv := resp.Header.Get("Server"); srv != "" {
		t.Errorf("GET /: Server %q, want it removed", srv)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("GET /: no X-Request-Id")
	}

	// The stylesheet, from the disk, with validators, a precompressed
	// sibling for a client that takes gzip, and 304 for one that has it.
	resp, body = get("/static/css/app.css")
	if resp.StatusCode != 200 || !bytes.Equal(body, css) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/css") {
		t.Fatalf("GET the stylesheet: %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	secure("the stylesheet", resp)
	etag := resp.Header.Get("ETag")
	if etag == "" || resp.Header.Get("Cache-Control") != "max-age=3600" {
		t.Errorf("the stylesheet: ETag %q, Cache-Control %q", etag, resp.Header.Get("Cache-Control"))
	}
	resp, body = get("/static/css/app.css", "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(body, gz.Bytes()) {
		t.Errorf("the stylesheet for gzip: Content-Encoding %q, %d bytes (the .gz has %d)", resp.Header.Get("Content-Encoding"), len(body), gz.Len())
	}
	if resp, _ = get("/static/css/app.css", "If-None-Match", etag); resp.StatusCode != 304 {
		t.Errorf("the stylesheet again: %d, want 304", resp.StatusCode)
	}
	if resp, _ = get("/static/../shop/settings.py"); resp.StatusCode == 200 {
		t.Errorf("a path out of the static root: %d", resp.StatusCode)
	}

	// The API, compressed with zstd for a client that asks.
	resp, body = get("/api/items", "Accept-Encoding", "zstd")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "zstd" {
		t.Fatalf("GET /api/items: %d, Content-Encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
	zr, err := zstd.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	zr.Close()
	if err != nil || !bytes.Contains(plain, []byte(`"item 49"`)) {
		t.Errorf("the API's JSON, decoded: %v, %.80q", err, plain)
	}
	secure("the API", resp)

	// Rate limited: 5/s with a burst of 5, 20 requests at once.
	limited, allowed := 0, 0
	for range 20 {
		resp, _ := get("/api/items")
		switch resp.StatusCode {
		case 200:
			allowed++
		case 429:
			limited++
			if resp.Header.Get("Retry-After") == "" || !strings.Contains(resp.Header.Get("Proxy-Status"), "http_request_denied") {
				t.Errorf("a 429 without Retry-After or Proxy-Status: %v", resp.Header)
			}
			secure("a 429", resp)
		default:
			t.Errorf("GET /api/items in the burst: %d", resp.StatusCode)
		}
	}
	// The one before the burst counts; 20 requests take well under a
	// second here, but a slow machine may earn the budget a few more.
	if limited == 0 || allowed > 12 {
		t.Errorf("burst of 20: %d allowed, %d limited; want at most about 5 allowed", allowed, limited)
	}

	// Django gone: the files are still served, the pages are sluice's 502
	// with the security headers on it.
	g.Stop()
	if resp, body = get("/static/css/app.css"); resp.StatusCode != 200 || !bytes.Equal(body, css) {
		t.Errorf("the stylesheet without Django: %d", resp.StatusCode)
	}
	resp, _ = get("/")
	if resp.StatusCode != 502 && resp.StatusCode != 503 {
		t.Errorf("the page without Django: %d, want 502 or 503", resp.StatusCode)
	}
	secure("sluice's own error", resp)
}
