package admin

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluice-proxy/sluice/cache"
	"github.com/sluice-proxy/sluice/config"
)

// CacheStore is one cache store in /api/upstreams: its counts, and what
// the caches of the routes that use it did.
type CacheStore struct {
	Name      string  `json:"name"`
	Kind      string  `json:"kind"` // memory, disk, disk+memory
	Objects   int64   `json:"objects"`
	Bytes     int64   `json:"bytes"`
	Capacity  int64   `json:"capacity"`
	Evictions uint64  `json:"evictions"`
	Purged    uint64  `json:"purged"`
	Hits      uint64  `json:"hits"`
	Misses    uint64  `json:"misses"`
	Stale     uint64  `json:"stale"`
	Collapsed uint64  `json:"collapsed"`
	Stored    uint64  `json:"stored"`
	HitRatio  float64 `json:"hit_ratio"` // NaN (null) before the first request
}

// MarshalJSON writes a NaN hit ratio as null.
func (c CacheStore) MarshalJSON() ([]byte, error) {
	type plain CacheStore
	if math.IsNaN(c.HitRatio) {
		return json.Marshal(struct {
			plain
			HitRatio *float64 `json:"hit_ratio"`
		}{plain: plain(c)})
	}
	return json.Marshal(plain(c))
}

// cacheStores returns gen's stores for /api/upstreams.
func cacheStores(gen *config.Generation) []CacheStore {
	out := []CacheStore{}
	for _, st := range gen.CacheStates() {
		c := st.Counts
		out = append(out, CacheStore{Name: st.Name, Kind: st.Kind, Objects: st.Stats.Objects, Bytes: st.Stats.Bytes,
			Capacity: st.Stats.Capacity, Evictions: st.Stats.Evictions, Purged: st.Stats.Purged,
			Hits: c.Hits, Misses: c.Misses + c.Revalidated, Stale: c.Stale, Collapsed: c.Collapsed, Stored: c.Stored,
			HitRatio: c.HitRatio()})
	}
	return out
}

// maxPurge bounds a purge request's body.
const maxPurge = 1 << 20

// purge removes from every cache store the responses a JSON body names by
// URL, URL prefix and tag, and has the other sluice instances sharing the
// redis section's server do the same: POST /api/cache/purge
// {"urls": [...], "prefixes": [...], "tags": [...]} answers
// {"purged": N}, the responses this instance's stores held.
func (a *Server) purge(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "purge takes POST, not "+r.Method)
		return
	}
	var p cache.Purge
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPurge))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		writeError(w, http.StatusBadRequest, "want a JSON object with urls, prefixes and tags (lists of strings): "+err.Error())
		return
	}
	if p.Empty() {
		writeError(w, http.StatusBadRequest, "nothing to purge: give urls, prefixes or tags")
		return
	}
	for i, u := range p.URLs {
		n, err := normalizeURL(u)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("urls[%d]: %v", i, err))
			return
		}
		p.URLs[i] = n
	}
	for i, u := range p.Prefixes {
		n, err := normalizeURL(u)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("prefixes[%d]: %v", i, err))
			return
		}
		p.Prefixes[i] = n
	}
	for i, t := range p.Tags {
		if t == "" || strings.ContainsAny(t, " \t\r\n,") {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("tags[%d]: a tag is a non-empty word, without spaces or commas", i))
			return
		}
	}
	gen := a.generation()
	if gen == nil {
		writeError(w, http.StatusServiceUnavailable, "no config loaded")
		return
	}
	n, err := gen.PurgeCache(r.Context(), p)
	a.log().Info("cache purge", "urls", len(p.URLs), "prefixes", len(p.Prefixes), "tags", len(p.Tags), "purged", n,
		"remote", r.RemoteAddr, "error", err)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]any{"purged": n, "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"purged": n})
}

// normalizeURL writes a URL as the cache names responses: scheme and host
// lower-cased, the host without the scheme's default port; the path and
// query as they were given (percent-encoded as a request carries them).
func normalizeURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	scheme := strings.ToLower(u.Scheme)
	if (scheme != "http" && scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http:// or https:// URL with a host", s)
	}
	host := strings.ToLower(strings.TrimSuffix(u.Host, "."))
	host = strings.TrimSuffix(host, map[string]string{"http": ":80", "https": ":443"}[scheme])
	rest := s[strings.Index(s, "://")+3:]
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[i:]
	} else {
		rest = ""
	}
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	return scheme + "://" + host + rest, nil
}
