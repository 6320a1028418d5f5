package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/cache"
	"github.com/sluice-proxy/sluice/config"
)

// cachingGeneration is a generation whose route caches in a memory store
// named pages, opened, holding three responses.
func cachingGeneration(t *testing.T) *config.Generation {
	t.Helper()
	yaml := "listen: [{address: 127.0.0.1:0}]\nroutes:\n  - {upstream: app, cache: {store: pages}}\n" +
		"cache:\n  stores:\n    pages: {memory: 8MiB}\nupstreams:\n  app:\n    servers: [{address: \"127.0.0.1:9\"}]\n"
	cfg, err := config.Parse("t.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := config.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gen.Start(context.Background())
	t.Cleanup(gen.Close)
	return gen
}

func postJSON(t *testing.T, h http.Handler, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	var out map[string]any
	json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

// TestCachePurge: POST /api/cache/purge removes the responses named by
// URL (scheme and host written as the cache writes them), prefix and tag,
// and says how many; bad requests get 400, other methods 405.
func TestCachePurge(t *testing.T) {
	gen := cachingGeneration(t)
	var seen int
	gen.CacheStores(func(name string, s cache.Stats) { seen++ })
	if seen != 1 {
		t.Fatalf("%d stores", seen)
	}
	a := &Server{Generation: func() *config.Generation { return gen }}
	h := a.Handler()
	put := func(url string, tags ...string) {
		m := &cache.Meta{URL: url, Tags: tags, Status: 200}
		if err := gen.CacheStore("pages").Put(url, &cache.Object{Meta: m}); err != nil {
			t.Fatal(err)
		}
	}
	put("http://example.com/a")
	put("http://example.com/b/1", "product-7")
	put("http://example.com/b/2")
	put("https://example.com/c", "product-7")
	for _, tt := range []struct {
		body   string
		status int
		purged float64
	}{
		{`{"urls": ["HTTP://Example.COM:80/a"]}`, 200, 1},
		{`{"prefixes": ["http://example.com/b/"]}`, 200, 2},
		{`{"tags": ["product-7"]}`, 200, 1},
		{`{"urls": ["http://example.com/a"]}`, 200, 0},
		{`{}`, 400, 0},
		{`{"urls": ["/relative"]}`, 400, 0},
		{`{"url": ["http://example.com/a"]}`, 400, 0},
		{`not json`, 400, 0},
		{`{"tags": ["two words"]}`, 400, 0},
	} {
		status, out := postJSON(t, h, "/api/cache/purge", tt.body)
		if status != tt.status || status == 200 && out["purged"] != tt.purged {
			t.Errorf("%s: %d %v, want %d purged %v", tt.body, status, out, tt.status, tt.purged)
		}
	}
	if status, _ := do(t, h, http.MethodGet, "/api/cache/purge"); status != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", status)
	}
	_, snap := do(t, h, http.MethodGet, "/api/upstreams")
	caches, _ := snap["caches"].([]any)
	if len(caches) != 1 {
		t.Fatalf("caches in /api/upstreams: %v", snap["caches"])
	}
	c := caches[0].(map[string]any)
	if c["name"] != "pages" || c["kind"] != "memory" || c["capacity"] != float64(8<<20) || c["purged"] != float64(4) ||
		c["hit_ratio"] != nil {
		t.Errorf("the store's state: %v", c)
	}
}
