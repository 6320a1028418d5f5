package cache

import (
	"strings"
	"sync"
)

// index finds a store's keys by URL, URL prefix and tag, for purges and
// invalidations. Each key's record names its owner (the entry it was made
// for), so that the removal of an entry that a newer one replaced leaves
// the newer one's record alone. It is safe for concurrent use.
type index struct {
	mu    sync.Mutex
	byKey map[string]indexRec
	byURL map[string]map[string]struct{}
	byTag map[string]map[string]struct{}
}

type indexRec struct {
	owner any
	url   string
	tags  []string
}

func newIndex() *index {
	return &index{byKey: map[string]indexRec{}, byURL: map[string]map[string]struct{}{},
		byTag: map[string]map[string]struct{}{}}
}

// add records key, owned by owner, under its URL and tags, replacing the
// key's earlier record.
func (x *index) add(key string, owner any, url string, tags []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byKey[key]; ok {
		x.unlink(key, old)
	}
	x.byKey[key] = indexRec{owner: owner, url: url, tags: tags}
	link(x.byURL, url, key)
	for _, t := range tags {
		link(x.byTag, t, key)
	}
}

// remove forgets key's record if owner still owns it.
func (x *index) remove(key string, owner any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if rec, ok := x.byKey[key]; ok && rec.owner == owner {
		x.unlink(key, rec)
		delete(x.byKey, key)
	}
}

func (x *index) unlink(key string, rec indexRec) {
	unlink(x.byURL, rec.url, key)
	for _, t := range rec.tags {
		unlink(x.byTag, t, key)
	}
}

func link(m map[string]map[string]struct{}, k, key string) {
	set := m[k]
	if set == nil {
		set = map[string]struct{}{}
		m[k] = set
	}
	set[key] = struct{}{}
}

func unlink(m map[string]map[string]struct{}, k, key string) {
	if set := m[k]; set != nil {
		delete(set, key)
		if len(set) == 0 {
			delete(m, k)
		}
	}
}

// match returns the keys p selects.
func (x *index) match(p *Purge) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	seen := map[string]struct{}{}
	var keys []string
	add := func(set map[string]struct{}) {
		for k := range set {
			if _, dup := seen[k]; !dup {
				seen[k] = struct{}{}
				keys = append(keys, k)
			}
		}
	}
	for _, u := range p.URLs {
		add(x.byURL[u])
	}
	for _, t := range p.Tags {
		add(x.byTag[t])
	}
	if len(p.Prefixes) > 0 {
		for u, set := range x.byURL {
			for _, pre := range p.Prefixes {
				if strings.HasPrefix(u, pre) {
					add(set)
					break
				}
			}
		}
	}
	return keys
}

// len returns the number of keys recorded.
func (x *index) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.byKey)
}
