package static

import (
	"math"

	"github.com/sluice-proxy/sluice/h1"
)

// What a Range field makes of a request.
type span uint8

const (
	whole         span = iota // no usable Range: the whole representation, 200
	part                      // one range: 206
	unsatisfiable             // 416
)

// byteRange reads a Range field (RFC 9110 §14.2) for a representation
// of size bytes. One range of bytes gives the part [off, off+n). Several
// ranges are served as the whole representation, in one 200, as the RFC
// allows (a server may ignore Range): a multipart/byteranges answer is
// rarely asked for (browsers ask for one range) and costs a copy of the
// parts. A field that does not parse, or is for another unit, is ignored
// too. A range that starts past the end, a "-0" suffix, or one whose last
// byte comes before its first, is unsatisfiable.
func byteRange(v []byte, size int64) (off, n int64, s span) {
	const unit = "bytes="
	if len(v) < len(unit) || !h1.EqualFold(v[:len(unit)], unit) {
		return 0, 0, whole
	}
	v = trimOWS(v[len(unit):])
	for i := range v {
		if v[i] == ',' {
			return 0, 0, whole
		}
	}
	dash := -1
	for i := range v {
		if v[i] == '-' {
			dash = i
			break
		}
	}
	if dash < 0 {
		return 0, 0, whole
	}
	first, last := v[:dash], v[dash+1:]
	if len(first) == 0 {
		// A suffix: the last N bytes.
		suffix, ok := decimal(last)
		switch {
		case !ok:
			return 0, 0, whole
		case suffix == 0 || size == 0:
			return 0, 0, unsatisfiable
		}
		suffix = min(suffix, size)
		return size - suffix, suffix, part
	}
	start, ok := decimal(first)
	if !ok {
		return 0, 0, whole
	}
	end := size - 1
	if len(last) > 0 {
		e, ok := decimal(last)
		switch {
		case !ok:
			return 0, 0, whole
		case e < start:
			return 0, 0, unsatisfiable
		}
		end = min(e, size-1)
	}
	if start >= size {
		return 0, 0, unsatisfiable
	}
	return start, end - start + 1, part
}

// decimal parses 1DIGIT; a value past int64 saturates (it is past any
// file's size all the same).
func decimal(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-9)/10 {
			n = math.MaxInt64
			continue
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
