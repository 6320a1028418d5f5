package cache

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestTiered: a response put in a tiered store is in both tiers; once
// Front no longer has it, a hit in Back serves it from its file and copies
// it into Front; a body over Promote stays in Back alone; a purge empties
// both tiers.
func TestTiered(t *testing.T) {
	front, err := NewMemory(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	back := openDisk(t, t.TempDir(), 64<<20)
	ts := &Tiered{Front: front, Back: back, Promote: 4096}
	defer ts.Close()

	small, large := object("s1", 1000), object("l1", 8000)
	for k, o := range map[string]*Object{"s1": small, "l1": large} {
		if err := ts.Put(k, o); err != nil {
			t.Fatal(err)
		}
	}
	inFront := func(k string) bool {
		o, err := front.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		if o != nil {
			o.Close()
		}
		return o != nil
	}
	if !inFront("s1") || inFront("l1") {
		t.Fatalf("after Put: small in Front %v (want true), large in Front %v (want false)", inFront("s1"), inFront("l1"))
	}

	front.Delete("s1") // as an eviction from Front would
	o, err := ts.Get("s1")
	if err != nil || o == nil {
		t.Fatalf("Get from Back: %v, %v", o, err)
	}
	if got := readBody(t, o); !bytes.Equal(got, small.Body.Bytes) {
		t.Fatalf("the body from Back differs: %d bytes", len(got))
	}
	o.Close()
	if !inFront("s1") {
		t.Fatal("a small hit in Back was not copied into Front")
	}
	o, err = ts.Get("l1")
	if err != nil || o == nil || o.Body.File == nil {
		t.Fatalf("the large one: %+v, %v (want it from its file)", o, err)
	}
	if got := readBody(t, o); !bytes.Equal(got, large.Body.Bytes) {
		t.Fatal("the large body differs")
	}
	o.Close()
	if inFront("l1") {
		t.Fatal("a body over Promote was copied into Front")
	}

	if n, err := ts.Purge(Purge{Tags: []string{"t-s"}}); err != nil || n != 1 {
		t.Fatalf("purge by tag: %d, %v (want 1)", n, err)
	}
	if o, _ := ts.Get("s1"); o != nil || inFront("s1") {
		t.Fatal("a purged response is still served")
	}
}

// objectStore is a Store as a library user might write one over storage
// of their own: bodies kept apart from their Meta and handed out as
// Readers, Purge by looking at every response (Purge.Selects).
type objectStore struct {
	mu      sync.Mutex
	objects map[string]storedObject
	gets    int
}

type storedObject struct {
	meta *Meta
	body []byte
}

func (s *objectStore) Get(key string) (*Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	o, ok := s.objects[key]
	if !ok {
		return nil, nil
	}
	return &Object{Meta: o.meta, Body: Body{Size: int64(len(o.body)), Reader: io.NopCloser(bytes.NewReader(o.body))}}, nil
}

func (s *objectStore) Put(key string, o *Object) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[key] = storedObject{meta: o.Meta, body: o.Body.Bytes}
	return nil
}

func (s *objectStore) Update(key string, m *Meta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.objects[key]; ok {
		s.objects[key] = storedObject{meta: m, body: o.body}
	}
	return nil
}

func (s *objectStore) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, key)
	return nil
}

func (s *objectStore) Purge(p Purge) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, o := range s.objects {
		if p.Selects(o.meta) {
			delete(s.objects, k)
			n++
		}
	}
	return n, nil
}

func (s *objectStore) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Objects: int64(len(s.objects))}
}

func (s *objectStore) Close() error { return nil }

// TestLibraryStore: a cache on a store of the library user's own, whose
// bodies are Readers, answers hits, ranges and HEAD from it, and purges
// through it by URL and tag.
func TestLibraryStore(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Surrogate-Key", "page "+strings.TrimPrefix(r.URL.Path, "/"))
		w.Write([]byte("body of " + r.URL.Path))
	})
	st := &objectStore{objects: map[string]storedObject{}}
	c := newTestCache(t, Options{Store: st})
	cl := dial(t, testProxy(t, o, c))
	for _, p := range []string{"/a", "/b"} {
		if resp, body := cl.get(p); resp.StatusCode != 200 || body != "body of "+p {
			t.Fatalf("miss %s: %d %q", p, resp.StatusCode, body)
		}
	}
	resp, body := cl.get("/a")
	if resp.StatusCode != 200 || body != "body of /a" || !strings.HasPrefix(resp.Header.Get("Cache-Status"), "sluice; hit") {
		t.Fatalf("hit: %d %q, Cache-Status %q", resp.StatusCode, body, resp.Header.Get("Cache-Status"))
	}
	if resp.Header.Get("Surrogate-Key") != "" {
		t.Fatalf("the tag field reached the client: %q", resp.Header.Get("Surrogate-Key"))
	}
	resp, body = cl.get("/a", "Range: bytes=8-9\r\n")
	if resp.StatusCode != 206 || body != "/a" {
		t.Fatalf("range from a Reader: %d %q", resp.StatusCode, body)
	}
	resp, body = cl.do("HEAD", "/b")
	if resp.StatusCode != 200 || body != "" || resp.ContentLength != int64(len("body of /b")) {
		t.Fatalf("HEAD: %d %q length %d", resp.StatusCode, body, resp.ContentLength)
	}
	if n := o.requests.Load(); n != 2 {
		t.Fatalf("the origin got %d requests, want 2", n)
	}
	if n, err := st.Purge(Purge{Tags: []string{"b"}}); err != nil || n != 1 {
		t.Fatalf("purge by tag: %d, %v (want 1)", n, err)
	}
	if n, err := st.Purge(Purge{URLs: []string{"http://example.com/a"}}); err != nil || n != 1 {
		t.Fatalf("purge by URL: %d, %v (want 1)", n, err)
	}
	for _, p := range []string{"/a", "/b"} {
		if resp, _ := cl.get(p); !strings.Contains(resp.Header.Get("Cache-Status"), "fwd=uri-miss") {
			t.Fatalf("%s after its purge: Cache-Status %q (want a miss)", p, resp.Header.Get("Cache-Status"))
		}
	}
	if n := o.requests.Load(); n != 4 {
		t.Fatalf("the origin got %d requests, want 4", n)
	}
}

// TestUnkeyedForwardedHost: a client's X-Forwarded-Host is neither in the
// key nor passed upstream as it came, so an origin that builds its page
// from it cannot be made to store a page for another host (the classic
// poisoning through an unkeyed header).
func TestUnkeyedForwardedHost(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Write([]byte(`<script src="//` + r.Header.Get("X-Forwarded-Host") + `/app.js">`))
	})
	c := newTestCache(t, Options{})
	cl := dial(t, testProxy(t, o, c))
	want := `<script src="//example.com/app.js">`
	if resp, body := cl.get("/", "X-Forwarded-Host: evil.example\r\n"); resp.StatusCode != 200 || body != want {
		t.Fatalf("the attacker's request: %d %q (want %q)", resp.StatusCode, body, want)
	}
	resp, body := cl.get("/")
	if body != want || !strings.HasPrefix(resp.Header.Get("Cache-Status"), "sluice; hit") {
		t.Fatalf("the next client got %q, Cache-Status %q (want %q from the store)", body, resp.Header.Get("Cache-Status"), want)
	}
}
