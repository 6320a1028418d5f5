package cache

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestNotStored: responses a shared cache must not store, or that sluice
// chooses not to (one that sets a cookie), go to the client and are
// fetched again; those that say so are stored without the fields they
// name, which the client that fetched them still gets.
func TestNotStored(t *testing.T) {
	for _, tt := range []struct {
		name    string
		status  int
		header  []string
		request string
		stored  bool
		missing string // a field the stored copy leaves out
	}{
		{"no-store", 200, []string{"Cache-Control", "max-age=60, no-store"}, "", false, ""},
		{"private", 200, []string{"Cache-Control", "max-age=60, private"}, "", false, ""},
		{"set-cookie", 200, []string{"Cache-Control", "max-age=60", "Set-Cookie", "session=alice"}, "", false, ""},
		{"set-cookie named by no-cache", 200, []string{"Cache-Control", `max-age=60, no-cache="Set-Cookie"`, "Set-Cookie", "session=alice"}, "", true, "Set-Cookie"},
		{"set-cookie named by private", 200, []string{"Cache-Control", `max-age=60, private="Set-Cookie"`, "Set-Cookie", "session=alice"}, "", true, "Set-Cookie"},
		{"private field", 200, []string{"Cache-Control", `max-age=60, private="X-User"`, "X-User", "alice"}, "", true, "X-User"},
		{"vary star", 200, []string{"Cache-Control", "max-age=60", "Vary", "*"}, "", false, ""},
		{"authorization", 200, []string{"Cache-Control", "max-age=60"}, "Authorization: Basic YTpi\r\n", false, ""},
		{"authorization, public", 200, []string{"Cache-Control", "max-age=60, public"}, "Authorization: Basic YTpi\r\n", true, ""},
		{"no freshness, 403", 403, []string{"Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT"}, "", false, ""},
		{"request no-store", 200, []string{"Cache-Control", "max-age=60"}, "Cache-Control: no-store\r\n", false, ""},
		{"too large", 200, []string{"Cache-Control", "max-age=60", "X-Big", "1"}, "", false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				for i := 0; i+1 < len(tt.header); i += 2 {
					w.Header().Add(tt.header[i], tt.header[i+1])
				}
				w.WriteHeader(tt.status)
				if w.Header().Get("X-Big") != "" {
					w.Write(make([]byte, 2<<20))
					return
				}
				w.Write([]byte("body"))
			})
			c := newTestCache(t, Options{MaxObject: 1 << 20})
			cl := dial(t, testProxy(t, o, c))
			resp, _ := cl.get("/x", tt.request)
			if tt.missing != "" && resp.Header.Get(tt.missing) == "" {
				t.Errorf("the client that fetched it did not get %s", tt.missing)
			}
			resp, _ = cl.get("/x", tt.request)
			want := int64(2)
			if tt.stored {
				want = 1
			}
			if got := o.requests.Load(); got != want {
				t.Errorf("the origin got %d requests, want %d (Cache-Status %q)", got, want, resp.Header.Get("Cache-Status"))
			}
			if tt.missing != "" && resp.Header.Get(tt.missing) != "" {
				t.Errorf("the stored copy kept %s: %q", tt.missing, resp.Header.Get(tt.missing))
			}
		})
	}
}

// TestVary: responses that vary are stored per variant, a request that
// matches none goes upstream, and each variant answers its own requests.
func TestVary(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language")
		fmt.Fprintf(w, "lang=%s", r.Header.Get("Accept-Language"))
	})
	c := newTestCache(t, Options{})
	cl := dial(t, testProxy(t, o, c))
	for _, tt := range []struct {
		lang, body, cacheStatus string
		requests                int64
	}{
		{"en", "lang=en", "fwd=uri-miss", 1},
		{"de", "lang=de", "fwd=vary-miss", 2},
		{"EN", "lang=en", "hit", 2},
		{"de", "lang=de", "hit", 2},
		{"", "lang=", "fwd=vary-miss", 3},
	} {
		extra := ""
		if tt.lang != "" {
			extra = "Accept-Language: " + tt.lang + "\r\n"
		}
		resp, body := cl.get("/v", extra)
		if body != tt.body || !strings.Contains(resp.Header.Get("Cache-Status"), tt.cacheStatus) || o.requests.Load() != tt.requests {
			t.Errorf("%q: %q, Cache-Status %q, %d origin requests; want %q %q %d", tt.lang, body,
				resp.Header.Get("Cache-Status"), o.requests.Load(), tt.body, tt.cacheStatus, tt.requests)
		}
	}
}

// TestVaryCookie: a page made for one user's cookie, that says so with
// Vary: Cookie, answers only requests with that cookie: another user's
// request is a miss and gets its own page.
func TestVaryCookie(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Cookie")
		fmt.Fprintf(w, "cart of %s", r.Header.Get("Cookie"))
	})
	c := newTestCache(t, Options{})
	cl := dial(t, testProxy(t, o, c))
	for _, tt := range []struct {
		cookie, body, cacheStatus string
		requests                  int64
	}{
		{"user=alice", "cart of user=alice", "fwd=uri-miss", 1},
		{"user=bob", "cart of user=bob", "fwd=vary-miss", 2},
		{"user=alice", "cart of user=alice", "hit", 2},
		{"", "cart of ", "fwd=vary-miss", 3},
		{"user=bob", "cart of user=bob", "hit", 3},
	} {
		extra := ""
		if tt.cookie != "" {
			extra = "Cookie: " + tt.cookie + "\r\n"
		}
		resp, body := cl.get("/cart", extra)
		if body != tt.body || !strings.Contains(resp.Header.Get("Cache-Status"), tt.cacheStatus) || o.requests.Load() != tt.requests {
			t.Errorf("%q: %q, Cache-Status %q, %d origin requests; want %q %q %d", tt.cookie, body,
				resp.Header.Get("Cache-Status"), o.requests.Load(), tt.body, tt.cacheStatus, tt.requests)
		}
	}
}

// TestStaleIfError: a stale response whose stale-if-error window is open
// answers instead of the origin's 503, and instead of sluice's own 502
// when the origin is down; not one that must be revalidated, nor one past
// its window. The route's window applies to responses that give none.
func TestStaleIfError(t *testing.T) {
	var failing atomic.Int32 // 0 ok, 1: 503
	var cc atomic.Value
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() == 1 {
			w.WriteHeader(503)
			w.Write([]byte("down"))
			return
		}
		w.Header().Set("Cache-Control", cc.Load().(string))
		w.Write([]byte("stored body"))
	})
	for _, tt := range []struct {
		cc       string
		routeSIE time.Duration
		stale    bool
	}{
		{"max-age=0, stale-if-error=60", 0, true},
		{"max-age=0, stale-if-error=60, must-revalidate", 0, false},
		{"max-age=0", 0, false},
		{"max-age=0", time.Minute, true},
		{"max-age=0, stale-if-error=0", time.Minute, false},
	} {
		t.Run(fmt.Sprintf("%s, route %v", tt.cc, tt.routeSIE), func(t *testing.T) {
			failing.Store(0)
			cc.Store(tt.cc)
			c := newTestCache(t, Options{StaleIfError: tt.routeSIE})
			cl := dial(t, testProxy(t, o, c))
			if _, body := cl.get("/s"); body != "stored body" {
				t.Fatalf("first: %q", body)
			}
			failing.Store(1)
			resp, body := cl.get("/s")
			if tt.stale {
				if resp.StatusCode != 200 || body != "stored body" || !strings.Contains(resp.Header.Get("Cache-Status"), "fwd=stale; fwd-status=503") {
					t.Errorf("503: %d %q %q", resp.StatusCode, body, resp.Header.Get("Cache-Status"))
				}
			} else if resp.StatusCode != 503 {
				t.Errorf("503: %d %q, want the origin's 503", resp.StatusCode, body)
			}
		})
	}
	t.Run("origin down", func(t *testing.T) {
		down := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=0, stale-if-error=60")
			w.Write([]byte("stored body"))
		})
		c := newTestCache(t, Options{})
		cl := dial(t, testProxy(t, down, c))
		if _, body := cl.get("/d"); body != "stored body" {
			t.Fatalf("first: %q", body)
		}
		down.srv.Close()
		resp, body := cl.get("/d")
		if resp.StatusCode != 200 || body != "stored body" || !strings.Contains(resp.Header.Get("Cache-Status"), "fwd=stale") ||
			!strings.Contains(resp.Header.Get("Cache-Status"), "detail=stale-if-error") {
			t.Errorf("down: %d %q %q", resp.StatusCode, body, resp.Header.Get("Cache-Status"))
		}
	})
}

// TestStaleWhileRevalidate: a stale response within its
// stale-while-revalidate window answers at once, and one background
// request (not the client's) revalidates it; the next request gets the
// new response.
func TestStaleWhileRevalidate(t *testing.T) {
	var version atomic.Int32
	release := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		v := version.Add(1)
		if v == 2 {
			<-release // the background revalidation waits; the client does not
		}
		if v == 2 {
			w.Header().Set("Cache-Control", "max-age=60")
		} else {
			w.Header().Set("Cache-Control", "max-age=0, stale-while-revalidate=60")
		}
		fmt.Fprintf(w, "v%d", v)
	})
	c := newTestCache(t, Options{})
	cl := dial(t, testProxy(t, o, c))
	if _, body := cl.get("/w"); body != "v1" {
		t.Fatalf("first: %q", body)
	}
	for i := 0; i < 3; i++ {
		resp, body := cl.get("/w")
		if body != "v1" || !strings.Contains(resp.Header.Get("Cache-Status"), "detail=stale-while-revalidate") {
			t.Fatalf("stale answer %d: %q %q", i, body, resp.Header.Get("Cache-Status"))
		}
	}
	close(release)
	wait.For(t, "the background revalidation stored", func() bool { return c.Counts().Stored == 2 })
	if resp, body := cl.get("/w"); body != "v2" || !strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
		t.Fatalf("after: %q %q", body, resp.Header.Get("Cache-Status"))
	}
	if got := o.requests.Load(); got != 2 {
		t.Errorf("the origin got %d requests, want 2 (one background revalidation)", got)
	}
	if got := c.Counts().Background; got != 1 {
		t.Errorf("%d background revalidations, want 1", got)
	}
}

// TestConditionalFromCache: a client's If-None-Match and If-Modified-Since
// are answered from the stored response, 304 with its validators.
func TestConditionalFromCache(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"e1"`)
		w.Header().Set("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")
		w.Write([]byte("body"))
	})
	c := newTestCache(t, Options{})
	cl := dial(t, testProxy(t, o, c))
	cl.get("/c")
	for _, tt := range []struct {
		extra  string
		status int
	}{
		{"If-None-Match: \"e1\"\r\n", 304},
		{"If-None-Match: W/\"e1\", \"x\"\r\n", 304},
		{"If-None-Match: \"e2\"\r\n", 200},
		{"If-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT\r\n", 304},
		{"If-Modified-Since: Sun, 31 Dec 2023 00:00:00 GMT\r\n", 200},
		{"If-None-Match: \"e2\"\r\nIf-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT\r\n", 200},
	} {
		resp, body := cl.get("/c", tt.extra)
		if resp.StatusCode != tt.status || tt.status == 304 && (body != "" || resp.Header.Get("ETag") != `"e1"`) {
			t.Errorf("%q: %d %q %v", tt.extra, resp.StatusCode, body, resp.Header)
		}
	}
	if got := o.requests.Load(); got != 1 {
		t.Errorf("the origin got %d requests, want 1", got)
	}
}

// TestInvalidation: a successful unsafe request invalidates what is
// stored for its URL and for the Location and Content-Location of its
// answer (of the same origin); a failed one does not.
func TestInvalidation(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			if r.URL.Query().Get("fail") != "" {
				w.WriteHeader(500)
				return
			}
			w.Header().Set("Location", "/b")
			w.Header().Set("Content-Location", "http://elsewhere.example/c")
			w.WriteHeader(201)
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Write([]byte(r.URL.Path))
	})
	c := newTestCache(t, Options{})
	cl := dial(t, testProxy(t, o, c))
	for _, p := range []string{"/a", "/b", "/c"} {
		cl.get(p)
	}
	cl.do("POST", "/a?fail=1", "Content-Length: 0\r\n")
	if resp, _ := cl.get("/a"); !strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
		t.Errorf("a failed POST invalidated /a: %q", resp.Header.Get("Cache-Status"))
	}
	cl.do("POST", "/a", "Content-Length: 0\r\n")
	for _, tt := range []struct {
		path string
		hit  bool
	}{{"/a", false}, {"/b", false}, {"/c", true}} {
		resp, _ := cl.get(tt.path)
		if strings.Contains(resp.Header.Get("Cache-Status"), "hit") != tt.hit {
			t.Errorf("%s after the POST: %q", tt.path, resp.Header.Get("Cache-Status"))
		}
	}
}

// TestTrailers: a response's trailers are stored with it and replayed on
// hits, to HTTP/1.1 and HTTP/2 clients.
func TestTrailers(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Trailer", "X-Digest")
		w.Write([]byte("chunked body"))
		w.(http.Flusher).Flush()
		w.Header().Set("X-Digest", "d1")
	})
	c := newTestCache(t, Options{})
	addr := testProxy(t, o, c)
	cl := dial(t, addr)
	for i := 0; i < 2; i++ {
		resp, body := cl.get("/t")
		if body != "chunked body" || resp.Trailer.Get("X-Digest") != "d1" {
			t.Errorf("HTTP/1.1 %d: %q, trailers %v, Cache-Status %q", i, body, resp.Trailer, resp.Header.Get("Cache-Status"))
		}
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/t", nil)
	req.Host = "example.com" // the key of the HTTP/1.1 requests
	resp, err := h2Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b := new(strings.Builder)
	_, err = fmt.Fprint(b, readAll(resp))
	if b.String() != "chunked body" || resp.Trailer.Get("X-Digest") != "d1" {
		t.Errorf("HTTP/2: %q, trailers %v", b.String(), resp.Trailer)
	}
	if got := o.requests.Load(); got != 1 {
		t.Errorf("the origin got %d requests, want 1", got)
	}
}

// TestCollapseUncacheable: when the response the waiters wait on turns
// out uncacheable, they go upstream themselves at once, and the next
// burst does not queue behind a writer.
func TestCollapseUncacheable(t *testing.T) {
	var mu sync.Mutex
	inFlight, most := 0, 0
	release := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		first := most == 1 && inFlight == 1
		mu.Unlock()
		if first {
			<-release
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Write([]byte("private"))
		mu.Lock()
		inFlight--
		mu.Unlock()
	})
	c := newTestCache(t, Options{})
	addr := testProxy(t, o, c)
	const n = 10
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := dial(t, addr)
			if _, body := cl.get("/u"); body != "private" {
				t.Errorf("%q", body)
			}
		}()
	}
	wait.For(t, "the waiters queued", func() bool { return waiting(c, "/u") == n-1 })
	close(release)
	wg.Wait()
	if got := o.requests.Load(); got != n {
		t.Errorf("the origin got %d requests, want %d", got, n)
	}
	// The key is remembered as uncacheable: a new burst goes upstream at
	// once, concurrently.
	before := o.requests.Load()
	mu.Lock()
	most = 0
	mu.Unlock()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dial(t, addr).get("/u")
		}()
	}
	wg.Wait()
	if got := o.requests.Load() - before; got != n {
		t.Errorf("the second burst: %d origin requests, want %d", got, n)
	}
}

// TestCollapseWriterFails: when the request the others wait on fails (its
// origin resets it), one waiter takes over and the others get its answer.
func TestCollapseWriterFails(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-release
			panic(http.ErrAbortHandler) // the connection is cut: no answer
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Write([]byte("second try"))
	})
	c := newTestCache(t, Options{})
	addr := testProxy(t, o, c)
	const n = 8
	var wg sync.WaitGroup
	results := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, body := dial(t, addr).get("/f")
			results <- fmt.Sprintf("%d %s", resp.StatusCode, body)
		}()
	}
	wait.For(t, "the waiters queued", func() bool { return waiting(c, "/f") == n-1 })
	close(release)
	wg.Wait()
	close(results)
	ok := 0
	for r := range results {
		if r == "200 second try" {
			ok++
		}
	}
	// The writer's own request fails (502: a GET cut after it was sent is
	// retried, and the retry gets the second answer, or the 502).
	if ok < n-1 {
		t.Errorf("%d of %d got the second try's answer", ok, n)
	}
	if got := calls.Load(); got > 3 {
		t.Errorf("the origin got %d requests, want at most 3", got)
	}
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
