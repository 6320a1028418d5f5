package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-proxy/sluice/cache"
)

// This file holds the parsing of the top-level cache section (its
// stores) and of a route's cache section; cachebuild.go builds them.

// CacheSection (key "cache", default none) names the stores that routes'
// caches keep responses in. Without it, a route's cache: {} uses a memory
// store named default of DefaultCacheMemory bytes.
type CacheSection struct {
	// Stores (key "stores", at least one) by name, in file order.
	Stores []CacheStore
	// Line is the line of the section in the file, for messages.
	Line int
}

// CacheStore is one store: in memory, on disk, or on disk with its hot
// objects in memory too.
type CacheStore struct {
	Name string
	// Memory (key "memory", 1MiB..1TiB) is the bytes kept in memory: the
	// store's size, or with Disk the size of its memory tier; 0: none.
	Memory int64
	// Disk (key "disk", default none) keeps the store's objects in a
	// directory, across restarts.
	Disk *CacheDisk
	// Line is the line of the store in the file, for messages.
	Line int
}

// CacheDisk is a store's directory.
type CacheDisk struct {
	// Path (key "path", required) is the directory, made if missing; a
	// relative one is relative to the config file's directory.
	Path string
	// Size (key "size", required, 1MiB..1PiB) bounds the bytes the
	// directory holds.
	Size int64
}

// DefaultCacheMemory is the size of the memory store named default that a
// route's cache uses in a file without a cache section.
const DefaultCacheMemory = 256 << 20

// DefaultCacheStore is the store a route's cache uses when it names none.
const DefaultCacheStore = "default"

// RouteCache is a route's HTTP cache (package cache). The section given,
// even empty ("cache: {}"), turns it on with the defaults.
type RouteCache struct {
	// Store (key "store", default "default") names the store.
	Store string
	// Key (key "key", default [method, scheme, host, path, query]) is what
	// a response is stored under: those parts of the request, and
	// header:NAME, cookie:NAME (see cache.ParseKey).
	Key []string
	// LockTimeout (key "lock.timeout", default 5s) is the longest a
	// request waits for another request's fetch of the same key; 0s
	// turns collapsed forwarding off.
	LockTimeout time.Duration
	// MaxObject (key "max_object", default 16MiB, 1KiB..1GiB) is the
	// largest response stored; a larger one passes through.
	MaxObject int64
	// StaleIfError and StaleWhileRevalidate (keys "stale_if_error",
	// "stale_while_revalidate", default 0s) are how long past freshness
	// a stored response may answer when the upstream fails, and while
	// one background request revalidates it, when the response's own
	// Cache-Control does not say.
	StaleIfError, StaleWhileRevalidate time.Duration
	// Heuristic (key "heuristic", default true) gives responses without
	// explicit freshness 10% of the time since their Last-Modified (RFC
	// 9111 §4.2.2), at most a day.
	Heuristic bool
	// Line is the line of the section in the file, for messages.
	Line int

	key                    cache.Key
	storeLine, storeColumn int
}

// storeName is what a store's name may hold.
var storeName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// cacheSection walks the top-level cache section.
func (d *decoder) cacheSection(n *yaml.Node, path string) *CacheSection {
	cs := &CacheSection{Line: n.Line}
	present := d.mapping(n, path, []field{
		{"stores", func(n *yaml.Node, path string) {
			if isNull(n) {
				return
			}
			if n.Kind != yaml.MappingNode {
				d.addf(n, path, "must be a mapping from store name to store, such as {default: {memory: 256MiB}}")
				return
			}
			paths := map[string]int{}
			for _, p := range d.pairs(n, path, nil) {
				name := p.key.Value
				spath := join(path, name)
				if !storeName.MatchString(name) {
					d.addf(p.key, spath, "a store name may only hold letters, digits, '_', '.' and '-'")
				}
				d.store = spath
				st := d.cacheStore(p.key, p.value, spath, name)
				d.store = ""
				if st.Disk != nil && st.Disk.Path != "" {
					if first, dup := paths[st.Disk.Path]; dup {
						d.addf(p.value, join(spath, "disk.path"), "%s is the directory of another store too (line %d): each store needs its own", st.Disk.Path, first)
					}
					paths[st.Disk.Path] = p.key.Line
				}
				cs.Stores = append(cs.Stores, st)
			}
		}},
	})
	d.required(n, path, present, "stores")
	if present["stores"] && len(cs.Stores) == 0 {
		d.addf(n, join(path, "stores"), "at least one store is required, such as {default: {memory: 256MiB}}")
	}
	return cs
}

// cacheStore walks one store.
func (d *decoder) cacheStore(key, n *yaml.Node, path, name string) CacheStore {
	st := CacheStore{Name: name, Line: key.Line}
	present := d.mapping(n, path, []field{
		{"memory", d.size(&st.Memory, cache.MinMemory, 1<<40)},
		{"disk", func(n *yaml.Node, path string) {
			st.Disk = &CacheDisk{}
			var pathNode *yaml.Node
			present := d.mapping(n, path, []field{
				{"path", func(n *yaml.Node, path string) {
					if d.str(&st.Disk.Path, checkNotEmpty)(n, path); st.Disk.Path != "" {
						pathNode = n
					}
				}},
				{"size", d.size(&st.Disk.Size, cache.MinDisk, 1<<50)},
			})
			if resolve(n).Kind == yaml.MappingNode {
				d.required(n, path, present, "path", "size")
			}
			if pathNode != nil {
				if !filepath.IsAbs(st.Disk.Path) {
					st.Disk.Path = filepath.Join(filepath.Dir(d.file), st.Disk.Path)
				}
				st.Disk.Path = filepath.Clean(st.Disk.Path)
				if msg := checkWritableDir(st.Disk.Path); msg != "" {
					d.addf(pathNode, join(path, "path"), "%s", msg)
				}
			}
		}},
	})
	if !present["memory"] && !present["disk"] {
		d.addf(n, path, "a store needs a size: memory: SIZE, or disk: {path: DIR, size: SIZE}")
	}
	return st
}

// checkWritableDir says why dir cannot be a store's directory: it is not
// a directory, or it (or the directory it would be made in) cannot be
// written to. Nothing is made or changed.
func checkWritableDir(dir string) string {
	at := dir
	for {
		fi, err := os.Stat(at)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			parent := filepath.Dir(at)
			if parent == at {
				return fmt.Sprintf("%s cannot be made: no directory above it exists", dir)
			}
			at = parent
			continue
		case err != nil:
			return err.Error()
		case !fi.IsDir():
			if at == dir {
				return fmt.Sprintf("%s is not a directory", dir)
			}
			return fmt.Sprintf("%s cannot be made: %s is not a directory", dir, at)
		}
		break
	}
	f, err := os.CreateTemp(at, ".sluice-write-check-")
	if err != nil {
		if at == dir {
			return fmt.Sprintf("%s cannot be written to: %v", dir, err)
		}
		return fmt.Sprintf("%s cannot be made: %v", dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return ""
}

// routeCache walks a route's cache section.
func (d *decoder) routeCache(n *yaml.Node, path string) *RouteCache {
	rc := &RouteCache{Store: DefaultCacheStore, Key: []string{"method", "scheme", "host", "path", "query"},
		LockTimeout: cache.DefaultLockTimeout, MaxObject: cache.DefaultMaxObject, Heuristic: true, Line: n.Line,
		key: cache.DefaultKey}
	d.mapping(n, path, []field{
		{"store", func(n *yaml.Node, path string) {
			rc.storeLine, rc.storeColumn = n.Line, n.Column
			d.str(&rc.Store, checkNotEmpty)(n, path)
		}},
		{"key", func(n *yaml.Node, path string) {
			var parts []string
			d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				var s string
				if d.scalarString(&s, n, path) {
					parts = append(parts, s)
				}
			})
			if n.Kind == yaml.ScalarNode && !isNull(n) {
				return // reported by sequence
			}
			k, err := cache.ParseKey(parts)
			if err != nil {
				d.addf(n, path, "%s", trimPrefix(err.Error(), "cache: "))
				return
			}
			rc.Key, rc.key = parts, k
		}},
		{"lock", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"timeout", d.duration(&rc.LockTimeout, false)},
			})
		}},
		{"max_object", d.size(&rc.MaxObject, 1<<10, 1<<30)},
		{"stale_if_error", d.duration(&rc.StaleIfError, false)},
		{"stale_while_revalidate", d.duration(&rc.StaleWhileRevalidate, false)},
		{"heuristic", d.boolean(&rc.Heuristic)},
	})
	return rc
}

// checkCache reports, for each route with a cache section, a store no
// cache section names (only default is known without one), and a route
// that answers without an upstream (static, respond), which nothing
// stores.
func (d *decoder) checkCache(c *Config) {
	for i, r := range c.Routes {
		rc := r.Cache
		if rc == nil {
			continue
		}
		path := join(index("routes", i), "cache")
		if r.Static != nil || r.Respond != nil {
			d.addf(&yaml.Node{Line: rc.Line}, path, "is for a route with an upstream; a static or respond route's answers are sluice's own")
		}
		known := c.Cache == nil && rc.Store == DefaultCacheStore
		if c.Cache != nil {
			known = slices.ContainsFunc(c.Cache.Stores, func(s CacheStore) bool { return s.Name == rc.Store })
		}
		if !known {
			at := &yaml.Node{Line: rc.storeLine, Column: rc.storeColumn}
			if rc.storeLine == 0 {
				at = &yaml.Node{Line: rc.Line}
			}
			var names []string
			if c.Cache != nil {
				for _, s := range c.Cache.Stores {
					names = append(names, s.Name)
				}
			}
			if len(names) == 0 {
				d.addf(at, join(path, "store"), "names store %q, which is not defined (without a top-level cache section, only %q is: a memory store of %s)",
					rc.Store, DefaultCacheStore, formatSize(DefaultCacheMemory))
			} else {
				d.addf(at, join(path, "store"), "names store %q, which cache.stores does not define (it has %v)", rc.Store, names)
			}
		}
	}
}

func trimPrefix(s, prefix string) string {
	if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}
