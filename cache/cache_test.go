package cache

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestMissThenHit: a response with explicit freshness is stored on the
// first request and answers the second without the upstream, with its Age
// and Cache-Status; its fields come back as stored.
func TestMissThenHit(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("X-Test", "stored")
		w.Write([]byte("hello"))
	})
	c := newTestCache(t, Options{})
	cl := dial(t, testProxy(t, o, c))
	resp, body := cl.get("/a")
	if resp.StatusCode != 200 || body != "hello" || !cacheStatusLike(resp.Header.Get("Cache-Status"), "sluice; fwd=uri-miss; ttl=60; stored") {
		t.Fatalf("first: %d %q, Cache-Status %q", resp.StatusCode, body, resp.Header.Get("Cache-Status"))
	}
	resp, body = cl.get("/a")
	if resp.StatusCode != 200 || body != "hello" || resp.Header.Get("X-Test") != "stored" || resp.Header.Get("Age") == "" ||
		!strings.HasPrefix(resp.Header.Get("Cache-Status"), "sluice; hit") {
		t.Fatalf("second: %d %q, %v", resp.StatusCode, body, resp.Header)
	}
	if n := o.requests.Load(); n != 1 {
		t.Fatalf("the origin got %d requests, want 1", n)
	}
	// HEAD from the stored GET.
	resp, body = cl.do("HEAD", "/a")
	if resp.StatusCode != 200 || body != "" || resp.ContentLength != 5 {
		t.Fatalf("HEAD: %d %q length %d", resp.StatusCode, body, resp.ContentLength)
	}
	// A range of the stored response.
	resp, body = cl.get("/a", "Range: bytes=1-3\r\n")
	if resp.StatusCode != 206 || body != "ell" || resp.Header.Get("Content-Range") != "bytes 1-3/5" {
		t.Fatalf("range: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if n := o.requests.Load(); n != 1 {
		t.Fatalf("the origin got %d requests, want 1", n)
	}
}

// TestRevalidate: a stale response with an ETag is validated with
// If-None-Match; the 304 freshens it and the stored body answers.
func TestRevalidate(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Cache-Control", "max-age=0")
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.Header().Set("X-Fresh", "304")
			w.WriteHeader(304)
			return
		}
		w.Write([]byte("body v1"))
	})
	c := newTestCache(t, Options{})
	cl := dial(t, testProxy(t, o, c))
	if _, body := cl.get("/r"); body != "body v1" {
		t.Fatalf("first: %q", body)
	}
	resp, body := cl.get("/r")
	if resp.StatusCode != 200 || body != "body v1" || resp.Header.Get("X-Fresh") != "304" ||
		!strings.Contains(resp.Header.Get("Cache-Status"), "fwd=stale; fwd-status=304") {
		t.Fatalf("second: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if got := o.last().Header.Get("If-None-Match"); got != `"v1"` {
		t.Fatalf("the revalidation sent If-None-Match %q", got)
	}
}

// cacheStatusLike reports whether a Cache-Status value is want, but for a
// ttl that may be a second less (the origin's Date counts whole seconds).
func cacheStatusLike(got, want string) bool {
	if got == want {
		return true
	}
	i := strings.Index(want, "ttl=")
	if i < 0 {
		return false
	}
	j := i + 4
	for j < len(want) && want[j] >= '0' && want[j] <= '9' {
		j++
	}
	n, _ := strconv.Atoi(want[i+4 : j])
	return got == want[:i+4]+strconv.Itoa(n-1)+want[j:]
}
