package cache

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

func header(fields ...string) *h1.Header {
	var h h1.Header
	for i := 0; i+1 < len(fields); i += 2 {
		h.Add(fields[i], fields[i+1])
	}
	return &h
}

func TestParseCacheControl(t *testing.T) {
	for _, tt := range []struct {
		values        []string
		maxAge, sMax  int64
		flags         uint32
		noCacheFields []string
		sie, swr      int64
	}{
		{[]string{"max-age=3600"}, 3600, -1, 0, nil, -1, -1},
		{[]string{"MaX-aGe=3600"}, 3600, -1, 0, nil, -1, -1},
		{[]string{"max-age=003600"}, 3600, -1, 0, nil, -1, -1},
		{[]string{`max-age="3600"`}, 3600, -1, 0, nil, -1, -1},
		{[]string{"max-age='3600'"}, -1, -1, dirMaxAgeBad, nil, -1, -1},
		{[]string{"max-age=-3600"}, -1, -1, dirMaxAgeBad, nil, -1, -1},
		{[]string{"max-age=3600.0"}, -1, -1, dirMaxAgeBad, nil, -1, -1},
		{[]string{"max-age =3600"}, -1, -1, 0, nil, -1, -1},
		{[]string{"max-age= 3600"}, -1, -1, 0, nil, -1, -1},
		{[]string{"max-age=99999999999"}, deltaMax, -1, 0, nil, -1, -1},
		{[]string{"max-age=1, max-age=1800"}, 1, -1, 0, nil, -1, -1},
		{[]string{"max-age=3600", "s-maxage=1"}, 3600, 1, 0, nil, -1, -1},
		{[]string{`extension="max-age=3600", max-age=1`}, 1, -1, 0, nil, -1, -1},
		{[]string{`max-age=1, extension="max-age=3600"`}, 1, -1, 0, nil, -1, -1},
		{[]string{"foobar, max-age=3600"}, 3600, -1, 0, nil, -1, -1},
		{[]string{"No-StOrE"}, -1, -1, dirNoStore, nil, -1, -1},
		{[]string{"max-age=10000, no-cache"}, 10000, -1, dirNoCache, nil, -1, -1},
		{[]string{`no-cache="Set-Cookie, X-A", max-age=3600`}, 3600, -1, 0, []string{"set-cookie", "x-a"}, -1, -1},
		{[]string{"private, public, must-revalidate, proxy-revalidate, must-understand, no-transform, immutable"}, -1, -1,
			dirPrivate | dirPublic | dirMustRevalidate | dirProxyRevalidate | dirMustUnderstand | dirNoTransform | dirImmutable, nil, -1, -1},
		{[]string{"max-age=2, stale-if-error=60, stale-while-revalidate=30"}, 2, -1, 0, nil, 60, 30},
		{[]string{`a="unterminated, max-age=5`}, -1, -1, 0, nil, -1, -1},
		{[]string{`x="a\"b", max-age=5`}, 5, -1, 0, nil, -1, -1},
		{[]string{", ,max-age=5,"}, 5, -1, 0, nil, -1, -1},
	} {
		var d directives
		var h h1.Header
		for _, v := range tt.values {
			h.Add("Cache-Control", v)
		}
		parseCacheControl(&d, &h)
		if d.maxAge != tt.maxAge || d.sMaxAge != tt.sMax || d.flags != tt.flags || d.staleIfError != tt.sie ||
			d.staleWhileRevalidate != tt.swr || !slices.Equal(d.noCacheFields, tt.noCacheFields) {
			t.Errorf("%q: max-age %d s-maxage %d flags %b no-cache %q sie %d swr %d; want %d %d %b %q %d %d", tt.values,
				d.maxAge, d.sMaxAge, d.flags, d.noCacheFields, d.staleIfError, d.staleWhileRevalidate,
				tt.maxAge, tt.sMax, tt.flags, tt.noCacheFields, tt.sie, tt.swr)
		}
	}
}

func TestSurrogateControl(t *testing.T) {
	for _, tt := range []struct {
		sc      string
		governs bool
		maxAge  int64
		noStore bool
	}{
		{"max-age=3600", true, 3600, false},
		{"max-age=3600;sluice", true, 3600, false},
		{"max-age=3600;other", false, -1, false},
		{"no-store", true, -1, true},
		{"max-age=60+30", true, 60, false},
		{"foo", false, -1, false},
		{"max-age =100", false, -1, false},
	} {
		var v respView
		v.parse(header("Cache-Control", "no-store", "Surrogate-Control", tt.sc), "sluice")
		d := v.eff()
		if v.surrogate != tt.governs || tt.governs && (d.maxAge != tt.maxAge || d.has(dirNoStore) != tt.noStore) {
			t.Errorf("%q: governs %v, max-age %d, no-store %v", tt.sc, v.surrogate, d.maxAge, d.has(dirNoStore))
		}
	}
}

func TestFreshness(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(httpDate) }
	for _, tt := range []struct {
		name   string
		status int
		h      *h1.Header
		fresh  bool // at now
		life   time.Duration
	}{
		{"max-age", 200, header("Cache-Control", "max-age=60"), true, time.Minute},
		{"s-maxage wins", 200, header("Cache-Control", "max-age=3600, s-maxage=1"), true, time.Second},
		{"max-age over Expires", 200, header("Cache-Control", "max-age=60", "Expires", date(-time.Hour), "Date", date(0)), true, time.Minute},
		{"Expires minus Date", 200, header("Expires", date(time.Hour), "Date", date(0)), true, time.Hour},
		{"Expires 0", 200, header("Expires", "0", "Date", date(0)), false, 0},
		{"Expires before Date", 200, header("Expires", date(300*time.Second), "Date", date(400*time.Second)), false, 0},
		{"Age over lifetime", 200, header("Cache-Control", "max-age=3600", "Age", "7200", "Date", date(0)), false, time.Hour},
		{"Age list", 200, header("Cache-Control", "max-age=3600", "Age", "0, 0", "Date", date(0)), false, time.Hour},
		{"two Age lines", 200, header("Cache-Control", "max-age=3600", "Age", "0", "Age", "0", "Date", date(0)), false, time.Hour},
		{"Age float", 200, header("Cache-Control", "max-age=3600", "Age", "1.0", "Date", date(0)), false, time.Hour},
		{"apparent age", 200, header("Cache-Control", "max-age=3600", "Date", date(-2*time.Hour)), false, time.Hour},
		{"heuristic 200", 200, header("Last-Modified", date(-100*time.Second), "Date", date(0)), true, 10 * time.Second},
		{"heuristic capped", 200, header("Last-Modified", date(-1000*24*time.Hour), "Date", date(0)), true, heuristicMax},
		{"no heuristic for 403", 403, header("Last-Modified", date(-100*time.Second), "Date", date(0)), false, 0},
		{"heuristic 599 public", 599, header("Last-Modified", date(-100*time.Second), "Date", date(0), "Cache-Control", "public"), true, 10 * time.Second},
		{"no-cache", 200, header("Cache-Control", "max-age=60, no-cache"), false, time.Minute},
		{"surrogate max-age", 200, header("Cache-Control", "max-age=1", "Surrogate-Control", "max-age=3600"), true, time.Hour},
	} {
		var v respView
		v.parse(tt.h, "sluice")
		f := computeFreshness(&v, tt.status, tt.h, now, now, true)
		if f.fresh(now) != tt.fresh || f.lifetime != tt.life {
			t.Errorf("%s: fresh %v lifetime %v, want %v %v", tt.name, f.fresh(now), f.lifetime, tt.fresh, tt.life)
		}
	}
}

func TestVariance(t *testing.T) {
	k := func(fields ...string) string {
		return variance("p", header(fields...), []string{"accept-language", "foo"})
	}
	same := [][2]string{
		{k("Foo", "1, 2"), k("Foo", "1", "Foo", "2")},
		{k("Foo", "1,2"), k("Foo", " 1 , 2 ")},
		{k("Accept-Language", "en, de"), k("Accept-Language", "EN,DE")},
		{k("Foo", "1", "Other", "x"), k("Other", "y", "Foo", "1")},
	}
	for i, p := range same {
		if p[0] != p[1] {
			t.Errorf("pair %d differs", i)
		}
	}
	differ := [][2]string{
		{k("Foo", "1"), k("Foo", "2")},
		{k(), k("Foo", "")},
		{k("Accept-Language", "en, de"), k("Accept-Language", "de, en")},
		{k("Foo", "1"), k()},
	}
	for i, p := range differ {
		if p[0] == p[1] {
			t.Errorf("pair %d matches", i)
		}
	}
	names, star := varyNames(header("Vary", "Foo, bar", "Vary", "FOO"))
	if !slices.Equal(names, []string{"bar", "foo"}) || star {
		t.Errorf("Vary names %q star %v", names, star)
	}
	for _, v := range []string{"*", "*, *", ", *", "Foo, *"} {
		if _, star := varyNames(header("Vary", v)); !star {
			t.Errorf("Vary %q: no star", v)
		}
	}
}

func TestNotModified(t *testing.T) {
	lm := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ims := func(d time.Duration) string { return lm.Add(d).Format(httpDate) }
	for _, tt := range []struct {
		h    *h1.Header
		etag string
		want bool
	}{
		{header("If-None-Match", `"abc"`), `"abc"`, true},
		{header("If-None-Match", `W/"abc"`), `"abc"`, true},
		{header("If-None-Match", `"x", "abc", "y"`), `"abc"`, true},
		{header("If-None-Match", `"x,abc"`), `"abc"`, false},
		{header("If-None-Match", `*`), `"abc"`, true},
		{header("If-None-Match", `"abc"`), ``, false},
		{header("If-None-Match", `"x"`, "If-Modified-Since", ims(time.Hour)), `"abc"`, false},
		{header("If-Modified-Since", ims(0)), `"abc"`, true},
		{header("If-Modified-Since", ims(-time.Second)), `"abc"`, false},
		{header("If-Modified-Since", "Friday, 01-Jan-27 00:00:00 GMT"), `"abc"`, false},
		{header("If-Modified-Since", "garbage"), `"abc"`, false},
	} {
		var etag []byte
		if tt.etag != "" {
			etag = []byte(tt.etag)
		}
		if got := notModified(tt.h, etag, lm); got != tt.want {
			t.Errorf("%q against %s: %v, want %v", tt.h.String(), tt.etag, got, tt.want)
		}
	}
}

func TestParseRange(t *testing.T) {
	for _, tt := range []struct {
		v      string
		size   int64
		off, n int64
		out    rangeOutcome
	}{
		{"bytes=0-1", 11, 0, 2, rangePartial},
		{"bytes=1-", 11, 1, 10, rangePartial},
		{"bytes=-1", 11, 10, 1, rangePartial},
		{"bytes=-100", 11, 0, 11, rangePartial},
		{"bytes=5-100", 11, 5, 6, rangePartial},
		{"bytes=11-", 11, 0, 0, rangeUnsatisfiable},
		{"bytes=-0", 11, 0, 0, rangeUnsatisfiable},
		{"bytes=0-1,3-4", 11, 0, 0, rangeNone},
		{"bytes=3-1", 11, 0, 0, rangeNone},
		{"items=0-1", 11, 0, 0, rangeNone},
		{"bytes=a-b", 11, 0, 0, rangeNone},
		{"BYTES=0-0", 11, 0, 1, rangePartial},
	} {
		br, out := parseRange([]byte(tt.v), tt.size)
		if out != tt.out || out == rangePartial && (br.off != tt.off || br.n != tt.n) {
			t.Errorf("%q of %d: %+v %d, want %d+%d %d", tt.v, tt.size, br, out, tt.off, tt.n, tt.out)
		}
	}
}

func TestParseKey(t *testing.T) {
	if _, err := ParseKey([]string{"method", "scheme", "host", "path", "query", "header:X-Tenant", "cookie:lang"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"path", "query"}, {"scheme", "host"}, {"scheme", "host", "path", "path"},
		{"scheme", "host", "path", "header:"}, {"scheme", "host", "path", "uri"}} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestMetaEncoding(t *testing.T) {
	m := &Meta{URL: "http://a/b?c", Tags: []string{"t1", "t2"}, Vary: []string{"accept"}, Status: 200, Reason: "OK",
		RequestTime: time.Unix(100, 5), ResponseTime: time.Unix(101, 7), Size: 42, Discard: time.Unix(200, 0)}
	m.Header.Add("Content-Type", "text/plain")
	m.Header.Add("X-Case", "Kept")
	m.Trailer.Add("X-Digest", "abc")
	b, _ := m.MarshalBinary()
	var got Meta
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got.URL != m.URL || !slices.Equal(got.Tags, m.Tags) || !slices.Equal(got.Vary, m.Vary) || got.Status != 200 ||
		got.Reason != "OK" || !got.RequestTime.Equal(m.RequestTime) || !got.ResponseTime.Equal(m.ResponseTime) ||
		got.Size != 42 || !got.Discard.Equal(m.Discard) || got.Header.String() != m.Header.String() ||
		got.Trailer.String() != m.Trailer.String() {
		t.Fatalf("decoded %+v", got)
	}
	for i := range b {
		var x Meta
		x.UnmarshalBinary(b[:i]) // a truncated encoding fails, never panics
	}
}
