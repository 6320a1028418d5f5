package cache

import (
	"bytes"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// Conditional requests answered from the cache (RFC 9111 §4.3.2, RFC 9110
// §13.2.2), and the validators sent upstream to revalidate (§4.3.1).

// originOnly reports whether the request carries a precondition that only
// an origin server can evaluate (If-Match, If-Unmodified-Since: RFC 9111
// §4.3.2): such a request goes upstream, its answer not taken from the
// cache.
func originOnly(req *h1.Header) bool {
	return req.Has("If-Match") || req.Has("If-Unmodified-Since")
}

// notModified reports whether a GET or HEAD's If-None-Match, or lacking
// one its If-Modified-Since, says the client's copy of the stored
// response is current: the answer is then 304 (RFC 9110 §13.2.2). lm is
// the stored response's Last-Modified, or its Date, or when it was
// received (RFC 9111 §4.3.2).
func notModified(req *h1.Header, etag []byte, lm time.Time) bool {
	if req.Has("If-None-Match") {
		if etag == nil {
			return false
		}
		for i := 0; i < req.Len(); i++ {
			if h1.EqualFold(req.Name(i), "If-None-Match") && tagListMatches(req.Value(i), etag) {
				return true
			}
		}
		return false
	}
	i := req.Index("If-Modified-Since")
	if i < 0 || req.Count("If-Modified-Since") > 1 {
		return false
	}
	ims, ok := parseDate(req.Value(i))
	if !ok || ims.After(time.Now()) {
		return false // invalid, or in the future: ignored (RFC 9110 §13.1.3)
	}
	return !lm.Truncate(time.Second).After(ims)
}

// tagListMatches reports whether an If-None-Match value holds "*" or an
// entity-tag that matches etag by weak comparison (RFC 9110 §8.8.3.2).
// Tags sent without their quotes are compared as they are.
func tagListMatches(list, etag []byte) bool {
	want := opaque(etag)
	for len(list) > 0 {
		var tag []byte
		tag, list = nextTag(list)
		if len(tag) == 1 && tag[0] == '*' {
			return true
		}
		if len(tag) > 0 && bytes.Equal(opaque(tag), want) {
			return true
		}
	}
	return false
}

// nextTag cuts the first entity-tag off a list of them: a quoted tag may
// hold a comma.
func nextTag(list []byte) (tag, rest []byte) {
	i := skipOWS(list, 0)
	start := i
	if i+1 < len(list) && (list[i] == 'W' || list[i] == 'w') && list[i+1] == '/' {
		i += 2
	}
	if i < len(list) && list[i] == '"' {
		if j := bytes.IndexByte(list[i+1:], '"'); j >= 0 {
			i += j + 2
		} else {
			i = len(list)
		}
	}
	for i < len(list) && list[i] != ',' {
		i++
	}
	tag = bytes.TrimRight(list[start:i], " \t")
	if i < len(list) {
		i++
	}
	return tag, list[i:]
}

// opaque returns an entity-tag without its weakness indicator, for weak
// comparison.
func opaque(tag []byte) []byte {
	if len(tag) > 2 && (tag[0] == 'W' || tag[0] == 'w') && tag[1] == '/' {
		return tag[2:]
	}
	return tag
}

// strongMatch reports whether two entity-tags match by strong comparison:
// both strong, and the same.
func strongMatch(a, b []byte) bool {
	return len(a) > 0 && a[0] == '"' && bytes.Equal(a, b)
}

// conditionalFields are the request fields a revalidation replaces with
// its own validators, and a fetch to fill the cache leaves out: the
// client's preconditions are evaluated against the stored response.
var conditionalFields = [...]string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range"}
