package cache

import (
	"errors"
	"io"
	"os"
	"slices"
	"strings"
)

// Store keeps a Cache's responses by key. Memory (NewMemory) and Disk
// (OpenDisk) are sluice's; a library user may implement one on other
// storage (an object store, say). A Store is safe for concurrent use.
//
// Keys are opaque strings the Cache makes (a primary key, or a primary key
// and a variant's digest); a store may hash them. Every stored response
// carries its URL and tags in its Meta, for Purge.
type Store interface {
	// Get returns the response stored under key, or nil and no error
	// when there is none. The caller must not change the Object (a
	// store may hand one Object to many requests), and calls its Close
	// once done with it: a store must keep its body readable until then,
	// even when the response is replaced, evicted or purged meanwhile.
	Get(key string) (*Object, error)
	// Put stores o under key, replacing what was there. o.Body holds the
	// whole body in memory (Bytes); the store may keep that slice, which
	// the caller no longer changes, and may refuse the response (too
	// large, or not admitted by its eviction policy) without an error.
	Put(key string, o *Object) error
	// Update replaces the Meta of the response stored under key, keeping
	// its body: a 304 freshened it. It does nothing when key holds
	// nothing.
	Update(key string, m *Meta) error
	// Delete removes what key holds.
	Delete(key string) error
	// Purge removes the responses that p selects and returns how many.
	Purge(p Purge) (int, error)
	// Stats returns the store's counts.
	Stats() Stats
	// Close releases the store's resources; responses handed out before
	// stay readable until closed themselves.
	Close() error
}

// Object is a stored response: its Meta and its body.
type Object struct {
	Meta *Meta
	Body Body
}

// Close releases the object's body (its file, its reader).
func (o *Object) Close() error {
	switch {
	case o.Body.File != nil:
		return o.Body.File.Close()
	case o.Body.Reader != nil:
		return o.Body.Reader.Close()
	}
	return nil
}

// Body is a stored response's body, Size bytes: in memory (Bytes), in an
// open file from Offset (File: sent with sendfile(2) where the client's
// connection allows), or read from a Reader, one of the three.
type Body struct {
	Size   int64
	Bytes  []byte
	File   *os.File
	Offset int64
	Reader io.ReadCloser
}

// Purge selects stored responses to remove: those whose URL
// (scheme://host/path?query) is one of URLs or starts with one of
// Prefixes, and those tagged with one of Tags (by Surrogate-Key or
// Cache-Tag). URLs are compared as sluice writes them: scheme and host
// lower-cased, the host without the scheme's default port.
type Purge struct {
	URLs     []string `json:"urls,omitempty"`
	Prefixes []string `json:"prefixes,omitempty"`
	Tags     []string `json:"tags,omitempty"`
}

// Empty reports whether p selects nothing.
func (p *Purge) Empty() bool { return len(p.URLs) == 0 && len(p.Prefixes) == 0 && len(p.Tags) == 0 }

// Selects reports whether p selects the response m describes: for a store
// that has no index of its own to find them by, and looks at each.
func (p *Purge) Selects(m *Meta) bool {
	if slices.Contains(p.URLs, m.URL) {
		return true
	}
	for _, pre := range p.Prefixes {
		if strings.HasPrefix(m.URL, pre) {
			return true
		}
	}
	for _, t := range p.Tags {
		if slices.Contains(m.Tags, t) {
			return true
		}
	}
	return false
}

// Stats are a store's counts. Evictions and Purged count since the
// store was made.
type Stats struct {
	Objects   int64  // responses held (Vary markers included)
	Bytes     int64  // bytes held, as the store accounts them
	Capacity  int64  // the most it holds
	Evictions uint64 // responses removed to make room (or past their time)
	Purged    uint64 // responses removed by purges and invalidations
}

// ErrClosed is returned by a store's methods after Close.
var ErrClosed = errors.New("cache: store closed")
