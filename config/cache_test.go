package config

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/cache"
)

// withCache is a config whose one route has the cache given (a flow
// mapping), and whose extra top-level lines are top.
func withCache(rc, top string) string {
	return "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - upstream: web\n    cache: " + rc +
		"\nupstreams:\n  web:\n    servers: [{address: \"127.0.0.1:9001\"}]\n" + top
}

func TestParseCache(t *testing.T) {
	c, err := Parse("t.yaml", []byte(withCache(`{}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	rc := c.Routes[0].Cache
	want := RouteCache{Store: "default", Key: []string{"method", "scheme", "host", "path", "query"},
		LockTimeout: 5 * time.Second, MaxObject: 16 << 20, Heuristic: true, Line: 4, key: cache.DefaultKey}
	if rc == nil || !reflect.DeepEqual(*rc, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", rc, want)
	}
	if got := cacheStores(c); len(got) != 1 || got[0].Name != "default" || got[0].Memory != 256<<20 {
		t.Errorf("the implicit store: %+v", got)
	}
	dir := t.TempDir()
	c, err = Parse(filepath.Join(dir, "t.yaml"), []byte(withCache(
		`{store: media, key: [scheme, host, path, "header:X-Tenant"], lock: {timeout: 0s}, max_object: 1MiB,
      stale_if_error: 1m, stale_while_revalidate: 10s, heuristic: false}`,
		"cache:\n  stores:\n    default: {memory: 8MiB}\n    media: {disk: {path: media, size: 1GiB}, memory: 2MiB}\n")))
	if err != nil {
		t.Fatal(err)
	}
	rc = c.Routes[0].Cache
	if rc.Store != "media" || rc.LockTimeout != 0 || rc.MaxObject != 1<<20 || rc.StaleIfError != time.Minute ||
		rc.StaleWhileRevalidate != 10*time.Second || rc.Heuristic || rc.key.String() != "[scheme, host, path, header:x-tenant]" {
		t.Errorf("every value: %+v", rc)
	}
	st := c.Cache.Stores
	if len(st) != 2 || st[0].Memory != 8<<20 || st[1].Disk == nil || st[1].Disk.Path != filepath.Join(dir, "media") ||
		st[1].Disk.Size != 1<<30 || st[1].Memory != 2<<20 {
		t.Errorf("stores: %+v", st)
	}
}

func TestParseCacheProblem(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notDir, nil, 0o644)
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"unknown store", withCache(`{store: media}`, ""), `t.yaml:4:20: routes[0].cache.store: names store "media", which is not defined (without a top-level cache section, only "default" is: a memory store of 256MiB)`},
		{"store not in the section", withCache(`{store: media}`, "cache:\n  stores:\n    default: {memory: 8MiB}\n"),
			`routes[0].cache.store: names store "media", which cache.stores does not define (it has [default])`},
		{"no size", withCache(`{}`, "cache:\n  stores:\n    default: {}\n"), `t.yaml:10:14: cache.stores.default: a store needs a size`},
		{"disk without size", withCache(`{}`, "cache:\n  stores:\n    default: {disk: {path: /tmp}}\n"), `cache.stores.default.disk.size: missing; it is required`},
		{"disk not a directory", withCache(`{}`, "cache:\n  stores:\n    default: {disk: {path: "+notDir+", size: 1GiB}}\n"), "is not a directory"},
		{"too small", withCache(`{}`, "cache:\n  stores:\n    default: {memory: 1KiB}\n"), `cache.stores.default.memory: must be between 1MiB and`},
		{"bad key", withCache(`{key: [path, query]}`, ""), `routes[0].cache.key: the key must include scheme and host`},
		{"unknown key part", withCache(`{key: [scheme, host, path, uri]}`, ""), `unknown key part "uri"`},
		{"max_object", withCache(`{max_object: 2GiB}`, ""), `routes[0].cache.max_object: must be between 1KiB and 1GiB`},
		{"unknown field", withCache(`{stale-if-error: 1s}`, ""), `t.yaml:4:13: routes[0].cache.stale-if-error: unknown key (did you mean "stale_if_error"?)`},
		{"static route", "listen: [{address: \"127.0.0.1:8080\"}]\nroutes:\n  - {path_prefix: /s/, static: {root: .}, cache: {}}\n  - upstream: web\nupstreams:\n  web:\n    servers: [{address: \"127.0.0.1:9001\"}]\n",
			`routes[0].cache: is for a route with an upstream`},
		{"two stores, one directory", withCache(`{}`, "cache:\n  stores:\n    default: {disk: {path: /tmp/x, size: 1GiB}}\n    b: {disk: {path: /tmp/x, size: 1GiB}}\n"),
			"is the directory of another store too"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v\nwant %q", err, tt.want)
			}
		})
	}
}

// TestBuildCache: a route's cache becomes a phase of its route, its store
// opened by Start; a reload's generation takes over the stores it defines
// alike, with their responses (resized when their size changed), and the
// old generation's Close leaves them open; a store the new file drops is
// closed.
func TestBuildCache(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "t.yaml")
	build := func(top string) *Generation {
		cfg, err := Parse(file, []byte(withCache(`{}`, top)))
		if err != nil {
			t.Fatal(err)
		}
		g, err := Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g1 := build("cache:\n  stores:\n    default: {memory: 8MiB}\n    disk: {disk: {path: d, size: 4MiB}}\n    gone: {memory: 2MiB}\n")
	g1.Start(context.Background())
	if len(g1.caches) != 1 {
		t.Fatalf("%d caches, want 1", len(g1.caches))
	}
	m := &cache.Meta{URL: "http://a/b", Status: 200}
	for _, name := range []string{"default", "disk"} {
		if err := g1.stores[name].ref.Put("k", &cache.Object{Meta: m}); err != nil {
			t.Fatal(err)
		}
	}
	gone := g1.stores["gone"].ref.get()

	g2 := build("cache:\n  stores:\n    default: {memory: 16MiB}\n    disk: {disk: {path: d, size: 8MiB}}\n")
	g2.Carry(g1)
	g2.Start(context.Background())
	g1.Close()
	defer g2.Close()
	for _, name := range []string{"default", "disk"} {
		o, err := g2.stores[name].ref.Get("k")
		if err != nil || o == nil {
			t.Errorf("%s: the response stored before the reload is gone (%v)", name, err)
			continue
		}
		o.Close()
	}
	var sizes []int64
	g2.CacheStores(func(name string, s cache.Stats) { sizes = append(sizes, s.Capacity) })
	if !reflect.DeepEqual(sizes, []int64{16 << 20, 8 << 20}) {
		t.Errorf("capacities after the reload %v, want 16MiB and 8MiB", sizes)
	}
	if err := gone.Put("x", &cache.Object{Meta: m}); err != cache.ErrClosed {
		t.Errorf("a store the reload dropped: Put gives %v, want ErrClosed", err)
	}
	if n, err := g2.PurgeCache(context.Background(), cache.Purge{URLs: []string{"http://a/b"}}); n != 2 || err != nil {
		t.Errorf("purge: %d %v, want 2", n, err)
	}
}
