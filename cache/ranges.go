package cache

import (
	"bytes"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// Byte ranges served from a stored complete response (RFC 9110 §14).

// byteRange is the range of a body a request asks for: off and n bytes.
type byteRange struct {
	off, n int64
}

// rangeOutcome is what a request's Range makes of a stored response.
type rangeOutcome uint8

const (
	rangeNone          rangeOutcome = iota // the whole response: no Range, or one to ignore
	rangePartial                           // 206, with the range
	rangeUnsatisfiable                     // 416
)

// parseRange reads a Range value for a body of size bytes (RFC 9110
// §14.1.2): "bytes=" and one range, first-last, first- or -suffix. Several
// ranges, another unit or a malformed value are ignored (the whole
// response is the answer, as §14.2 allows); a range that starts past the
// end is unsatisfiable.
func parseRange(v []byte, size int64) (byteRange, rangeOutcome) {
	const prefix = "bytes="
	if len(v) <= len(prefix) || !h1.EqualFold(v[:len(prefix)], prefix) {
		return byteRange{}, rangeNone
	}
	spec := bytes.TrimSpace(v[len(prefix):])
	if bytes.IndexByte(spec, ',') >= 0 {
		return byteRange{}, rangeNone // several ranges: the whole response
	}
	dash := bytes.IndexByte(spec, '-')
	if dash < 0 {
		return byteRange{}, rangeNone
	}
	first, last := spec[:dash], spec[dash+1:]
	if len(first) == 0 {
		// -suffix: the last n bytes.
		n, ok := h1.ParseDecimal(last)
		if !ok {
			return byteRange{}, rangeNone
		}
		if n == 0 || size == 0 {
			return byteRange{}, rangeUnsatisfiable
		}
		n = min(n, size)
		return byteRange{off: size - n, n: n}, rangePartial
	}
	off, ok := h1.ParseDecimal(first)
	if !ok {
		return byteRange{}, rangeNone
	}
	end := size - 1
	if len(last) > 0 {
		e, ok := h1.ParseDecimal(last)
		if !ok || e < off {
			return byteRange{}, rangeNone // invalid: ignored
		}
		end = min(e, size-1)
	}
	if off >= size {
		return byteRange{}, rangeUnsatisfiable
	}
	return byteRange{off: off, n: end - off + 1}, rangePartial
}

// ifRangeHolds reports whether a request's If-Range, if any, lets its
// Range apply to the stored response (RFC 9110 §13.1.5): a strong ETag
// that matches, or a date equal to its Last-Modified.
func ifRangeHolds(req *h1.Header, etag []byte, lm time.Time, lmOK bool) bool {
	v := req.Get("If-Range")
	if v == nil {
		return true
	}
	if len(v) > 0 && (v[0] == '"' || v[0] == 'W') {
		return strongMatch(v, etag)
	}
	t, ok := parseDate(v)
	return ok && lmOK && t.Equal(lm)
}
