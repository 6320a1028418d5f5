package cache

import (
	"io"
	"strconv"
	"time"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// Answers made from a stored response (RFC 9111 §4): the stored head
// with its Age (§5.1) and Cache-Status, the client's conditions and range
// applied, as a Response that stands in for an upstream's.

// respond returns the answer to the session's request from obj, whose
// freshness is fr, at now, taking over obj (its body goes with the
// answer, or is closed). cs is what the cache did, for Cache-Status.
func (c *Cache) respond(s *proxy.Session, obj *Object, fr *freshness, now time.Time, cs *cacheStatus) *proxy.Response {
	m := obj.Meta
	req := &s.Request
	r := &proxy.Response{Status: m.Status, AsUpstream: true}
	age := fr.age(now)
	cs.ttl, cs.hasTTL = fr.lifetime-age, true
	c.head(&r.Header, m, age, cs)
	head := req.Method() == "HEAD"

	// The client's own preconditions, against the stored response
	// (§4.3.2): the validators are looked at only when it has some.
	var etag []byte
	var lm, lastMod time.Time // lm: Last-Modified, else Date, else when it came
	var lastModOK bool
	cond := conditional(&req.Header)
	if cond || req.Header.Has("If-Range") {
		etag = m.Header.Get("ETag")
		lastMod, lastModOK = singleDate(&m.Header, "Last-Modified")
		lm = lastMod
		if !lastModOK {
			var ok bool
			if lm, ok = singleDate(&m.Header, "Date"); !ok {
				lm = m.ResponseTime
			}
		}
	}
	if cond && m.Status == 200 && notModified(&req.Header, etag, lm) {
		r.Status = 304
		dropFields(&r.Header, "Content-Length", "Content-Range")
		obj.Close()
		s.Note("cache", cs.note())
		return r
	}
	if head {
		// The GET's head, its Content-Length included (§9.3.2 of RFC
		// 9110: a HEAD's answer is the GET's without the body).
		if !r.Header.Has("Content-Length") && m.Trailer.Len() == 0 {
			r.Header.Add("Content-Length", strconv.FormatInt(obj.Body.Size, 10))
		}
		obj.Close()
		s.Note("cache", cs.note())
		return r
	}

	body := obj.Body
	if rv := req.Header.Get("Range"); rv != nil && m.Status == 200 && ifRangeHolds(&req.Header, etag, lastMod, lastModOK) {
		br, out := parseRange(rv, body.Size)
		switch out {
		case rangePartial:
			r.Status = 206
			dropFields(&r.Header, "Content-Length", "Content-Range")
			var b []byte
			b = append(b, "bytes "...)
			b = strconv.AppendInt(b, br.off, 10)
			b = append(b, '-')
			b = strconv.AppendInt(b, br.off+br.n-1, 10)
			b = append(b, '/')
			b = strconv.AppendInt(b, body.Size, 10)
			r.Header.AddBytes([]byte("Content-Range"), b)
			c.setBody(r, obj, br.off, br.n)
			s.Note("cache", cs.note())
			return r
		case rangeUnsatisfiable:
			r.Status = 416
			dropFields(&r.Header, "Content-Length", "Content-Range", "Content-Type", "Content-Encoding")
			r.Header.Add("Content-Range", "bytes */"+strconv.FormatInt(body.Size, 10))
			obj.Close()
			s.Note("cache", cs.note())
			return r
		}
	}
	dropFields(&r.Header, "Content-Length")
	c.setBody(r, obj, 0, body.Size)
	if m.Trailer.Len() > 0 {
		r.Trailers.CopyFrom(&m.Trailer)
	}
	s.Note("cache", cs.note())
	return r
}

// head builds the head of an answer from a stored response: its fields
// but those for this cache alone, a Date if it had none (servedFields,
// made once per stored Meta), then Age and Cache-Status after any of the
// upstream's.
func (c *Cache) head(h *h1.Header, m *Meta, age time.Duration, cs *cacheStatus) {
	served := m.served
	if served == nil {
		served = servedFields(m)
	}
	h.Grow(served.Len()+2, int(fieldsLen(served))+80)
	h.CopyFrom(served)
	var b [48]byte
	secs := min(int64(age/time.Second), deltaMax)
	h.AddBytes([]byte("Age"), strconv.AppendInt(b[:0], secs, 10))
	h.AddBytes([]byte("Cache-Status"), cs.appendTo(b[:0], c.token))
}

// servedFields returns the fields of a stored response that its answers
// carry: all but Age (each answer has its own) and those for this cache
// alone, and a Date (when it was received) if it had none.
func servedFields(m *Meta) *h1.Header {
	src := &m.Header
	h := new(h1.Header)
	h.Grow(src.Len()+1, int(fieldsLen(src))+40)
	hasDate := false
	for i := 0; i < src.Len(); i++ {
		name := src.Name(i)
		switch {
		case h1.EqualFold(name, "Age"), internalField(name):
			continue
		case h1.EqualFold(name, "Date"):
			hasDate = true
		}
		h.AddBytes(name, src.Value(i))
	}
	if !hasDate {
		var b [32]byte
		h.AddBytes([]byte("Date"), appendDate(b[:0], m.ResponseTime))
	}
	return h
}

// setBody makes n bytes of obj's body from off the answer's body.
func (c *Cache) setBody(r *proxy.Response, obj *Object, off, n int64) {
	b := obj.Body
	switch {
	case b.Bytes != nil || n == 0:
		r.Body = b.Bytes[off : off+n]
		obj.Close()
	case b.File != nil:
		r.File = &proxy.FileBody{File: b.File, Offset: b.Offset + off, Size: n}
	default:
		r.Stream = &proxy.StreamBody{Reader: &sectionReader{r: b.Reader, skip: off, left: n}, Size: n}
	}
}

// dropFields removes the fields named.
func dropFields(h *h1.Header, names ...string) {
	for _, n := range names {
		if h.Has(n) {
			h.Del(n)
		}
	}
}

// sectionReader reads n bytes of a body from off, when the body comes
// from a reader (a library user's store): the bytes before off are read
// and thrown away.
type sectionReader struct {
	r          interface{ Read([]byte) (int, error) }
	skip, left int64
}

func (s *sectionReader) Read(p []byte) (int, error) {
	for s.skip > 0 {
		var buf [4096]byte
		n, err := s.r.Read(buf[:min(int64(len(buf)), s.skip)])
		s.skip -= int64(n)
		if err != nil {
			return 0, err
		}
	}
	if s.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	s.left -= int64(n)
	return n, err
}

func (s *sectionReader) Close() error {
	if c, ok := s.r.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
