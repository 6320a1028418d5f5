package static

import (
	"bytes"
	"io/fs"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// httpDate is the IMF-fixdate layout (RFC 9110 §5.6.7), which sluice
// sends; dateLayouts are those it accepts, the obsolete two included, as
// the RFC requires of recipients.
const httpDate = "Mon, 02 Jan 2006 15:04:05 GMT"

var dateLayouts = [...]string{httpDate, "Monday, 02-Jan-06 15:04:05 GMT", "Mon Jan _2 15:04:05 2006"}

func parseDate(v []byte) (time.Time, bool) {
	for _, l := range dateLayouts {
		if t, err := time.Parse(l, string(v)); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// now returns the time as an HTTP date, formatted once a second.
func now() string {
	t := time.Now()
	if d := date.Load(); d != nil && d.sec == t.Unix() {
		return d.text
	}
	d := &stamp{sec: t.Unix(), text: t.UTC().Format(httpDate)}
	date.Store(d)
	return d.text
}

var date atomic.Pointer[stamp]

type stamp struct {
	sec  int64
	text string
}

// appendETag appends the strong entity tag of a file's representation:
// its modification time and size (as nginx makes its own), and the
// content coding of a precompressed sibling, so that the representations
// of one file never share a tag.
func appendETag(b []byte, fi fs.FileInfo, coding string) []byte {
	b = append(b, '"')
	b = strconv.AppendInt(b, fi.ModTime().UnixNano(), 16)
	b = append(b, '-')
	b = strconv.AppendInt(b, fi.Size(), 16)
	if coding != "" {
		b = append(b, '-')
		b = append(b, coding...)
	}
	return append(b, '"')
}

// outcome is what the preconditions of a request make of it.
type outcome uint8

const (
	proceed     outcome = iota
	notModified         // 304
	failed              // 412
)

// preconditions evaluates a GET's or HEAD's conditional fields against
// the representation's tag and modification time, in RFC 9110 §13.2.2's
// order: If-Match, else If-Unmodified-Since (412 when they fail); then
// If-None-Match, else If-Modified-Since (304 when they fail). Dates
// compare at the second, the precision of Last-Modified; an invalid date
// is ignored, as the RFC says.
func preconditions(h *h1.Header, tag []byte, mod time.Time) outcome {
	mod = mod.Truncate(time.Second)
	if h.Has("If-Match") {
		if !matchTags(h, "If-Match", tag, true) {
			return failed
		}
	} else if v := h.Get("If-Unmodified-Since"); v != nil {
		if t, ok := parseDate(v); ok && mod.After(t) {
			return failed
		}
	}
	if h.Has("If-None-Match") {
		if matchTags(h, "If-None-Match", tag, false) {
			return notModified
		}
	} else if v := h.Get("If-Modified-Since"); v != nil {
		if t, ok := parseDate(v); ok && !mod.After(t) {
			return notModified
		}
	}
	return proceed
}

// matchTags reports whether any field called name lists tag, or "*"
// (RFC 9110 §13.1.1–2): strong comparison (neither tag weak) when strong
// is set, weak (the opaque parts equal) otherwise. A malformed list
// matches nothing after the malformed tag.
func matchTags(h *h1.Header, name string, tag []byte, strong bool) bool {
	for i := 0; i < h.Len(); i++ {
		if !h1.EqualFold(h.Name(i), name) {
			continue
		}
		v := h.Value(i)
		for {
			v = trimOWS(v)
			for len(v) > 0 && v[0] == ',' {
				v = trimOWS(v[1:])
			}
			if len(v) == 0 {
				break
			}
			if v[0] == '*' {
				return true
			}
			weak := false
			if len(v) >= 2 && v[0] == 'W' && v[1] == '/' {
				weak, v = true, v[2:]
			}
			if len(v) == 0 || v[0] != '"' {
				break
			}
			end := 1
			for end < len(v) && v[end] != '"' {
				end++
			}
			if end == len(v) {
				break
			}
			if bytes.Equal(v[:end+1], tag) && !(strong && weak) {
				return true
			}
			v = v[end+1:]
		}
	}
	return false
}

// ifRange reports whether a Range may be honoured under the request's
// If-Range (RFC 9110 §13.1.5): with none, yes; with an entity tag, when
// it is strongly the representation's; with a date, when it is exactly
// its Last-Modified.
func ifRange(h *h1.Header, tag []byte, mod time.Time) bool {
	v := trimOWS(h.Get("If-Range"))
	switch {
	case !h.Has("If-Range"):
		return true
	case len(v) > 0 && v[0] == '"':
		return bytes.Equal(v, tag)
	case len(v) > 1 && v[0] == 'W' && v[1] == '/':
		return false // a weak tag never matches strongly
	}
	t, ok := parseDate(v)
	return ok && t.Equal(mod.Truncate(time.Second))
}

func trimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}
