package cache

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// The parsers of what comes from the network or the disk, fuzzed: none
// may panic, and what they hand back must hold together.

// FuzzCacheControl parses Cache-Control and Surrogate-Control values.
func FuzzCacheControl(f *testing.F) {
	for _, s := range []string{"max-age=3600", `no-cache="Set-Cookie, X-A", max-age="60"`, `x="a\"b,c", s-maxage=1`,
		"max-age=60+30;sluice", `a="unterminated`, "max-age =1, ,", "private, no-store;other", "max-age=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var h h1.Header
		h.Add("Cache-Control", v)
		h.Add("Surrogate-Control", v)
		var view respView
		view.parse(&h, "sluice")
		d := view.eff()
		if d.maxAge > deltaMax || d.sMaxAge > deltaMax || d.maxAge < -1 || d.sMaxAge < -1 {
			t.Fatalf("%q: max-age %d, s-maxage %d", v, d.maxAge, d.sMaxAge)
		}
		now := time.Now()
		fr := computeFreshness(&view, 200, &h, now, now, true)
		if fr.lifetime < 0 || fr.initialAge < 0 {
			t.Fatalf("%q: %+v", v, fr)
		}
	})
}

// FuzzRange parses Range values against a body's size.
func FuzzRange(f *testing.F) {
	for _, s := range []string{"bytes=0-1", "bytes=-5", "bytes=5-", "bytes=0-1,2-3", "bytes=9999999999999999999-"} {
		f.Add(s, int64(10))
	}
	f.Fuzz(func(t *testing.T, v string, size int64) {
		if size < 0 {
			return
		}
		br, out := parseRange([]byte(v), size)
		if out == rangePartial && (br.off < 0 || br.n <= 0 || br.off+br.n > size) {
			t.Fatalf("%q of %d: %+v", v, size, br)
		}
	})
}

// FuzzETags matches If-None-Match lists against a stored tag.
func FuzzETags(f *testing.F) {
	for _, s := range []string{`"a", W/"b"`, `*`, `"a,b", "c`, `W/`, `w/"x"`} {
		f.Add(s, `"a"`)
	}
	f.Fuzz(func(t *testing.T, list, etag string) {
		got := tagListMatches([]byte(list), []byte(etag))
		if strings.Trim(list, " \t") == etag && etag != "" && !strings.ContainsAny(etag, `,"`) && !got {
			t.Fatalf("%q does not match itself", list)
		}
	})
}

// FuzzMeta decodes stored metadata: whatever the bytes, no panic, and
// what decodes encodes to the same bytes.
func FuzzMeta(f *testing.F) {
	m := &Meta{URL: "http://a/b", Tags: []string{"t"}, Vary: []string{"accept"}, Status: 200, Reason: "OK",
		RequestTime: time.Unix(1, 2), ResponseTime: time.Unix(3, 4), Size: 5}
	m.Header.Add("Content-Type", "text/plain")
	m.Trailer.Add("X-T", "1")
	b, _ := m.MarshalBinary()
	f.Add(b)
	f.Add([]byte{metaVersion, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Meta
		if m.UnmarshalBinary(b) != nil {
			return
		}
		again, _ := m.MarshalBinary()
		var m2 Meta
		if err := m2.UnmarshalBinary(again); err != nil {
			t.Fatalf("a decoded Meta does not decode once encoded again: %v", err)
		}
	})
}

// FuzzDiskRecord parses the disk store's index records and object heads.
func FuzzDiskRecord(f *testing.F) {
	e := &diskEntry{hash: strings.Repeat("ab", 32), file: "ab/" + strings.Repeat("ab", 32) + "-1", size: 10, url: "http://a/", tags: []string{"x"}}
	rec := appendRecord(nil, recPut, e)
	f.Add(rec[8:])
	f.Add(appendRecord(nil, recDelete, e)[8:])
	f.Fuzz(func(t *testing.T, p []byte) {
		op, e, ok := parseRecord(p)
		if !ok {
			return
		}
		if op != recPut && op != recDelete || !validFileName(e.file) || strings.Contains(e.file, "..") {
			t.Fatalf("accepted %q: %c %+v", p, op, e)
		}
		again := appendRecord(nil, op, e)
		if _, _, ok := parseRecord(again[8:]); !ok {
			t.Fatal("a parsed record does not parse once written again")
		}
	})
}

// FuzzObjectHead parses the head of an object file.
func FuzzObjectHead(f *testing.F) {
	var b bytes.Buffer
	b.Write(diskMagic[:])
	b.Write([]byte{0, 0, 0, 10})
	b.Write(make([]byte, 10))
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, p []byte) {
		parseObjectHead(p, nil, int64(len(p)))
	})
}
