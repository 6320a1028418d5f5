package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// Meta is what a store keeps of a response beside its body: the response
// head as stored (the fields a cache must not store removed: RFC 9111
// §3.1), its trailers, when it was asked for and received, the URL and
// tags purges find it by, and for a Vary marker the fields its variants
// vary on. A Meta handed to a store, or returned by one, is not changed
// afterwards: an update stores a new one.
type Meta struct {
	// URL is the request's URL, scheme://host/path?query.
	URL string
	// Tags are the response's Surrogate-Key and Cache-Tag tags.
	Tags []string
	// Vary, for a marker, lists the fields (lower-case, sorted) the
	// responses stored for the key vary on; each is stored under its
	// variant key. A marker has no head and no body.
	Vary   []string
	Marker bool
	// Status, Reason and Header are the response head; Trailer its
	// trailers (empty: none).
	Status  int
	Reason  string
	Header  h1.Header
	Trailer h1.Header
	// RequestTime and ResponseTime are when the request that fetched the
	// response (or last validated it) was sent and its answer received
	// (RFC 9111 §4.2.3).
	RequestTime, ResponseTime time.Time
	// Size is the body's length.
	Size int64
	// Discard is when the response is no longer worth keeping: stale
	// past every window in which it could still answer, with nothing to
	// revalidate it by. Zero keeps it until it is evicted.
	Discard time.Time

	// fr is the freshness the cache worked out when it made the Meta,
	// and served the fields its answers carry (servedFields); nil in one
	// decoded from storage. Set before the Meta is shared.
	fr     *freshness
	served *h1.Header
}

// metaOverhead is what a store counts for an entry beyond its bytes: the
// structures that hold it (the Meta, its map entries, the eviction
// policy's node), roughly.
const metaOverhead = 256

// Weight is the bytes an entry under key with this Meta and a body in
// memory takes, as stores account it: the body, the head and trailers,
// the key (twice: the index and the map), the URL, tags and a fixed
// overhead.
func (m *Meta) Weight(key string) int64 {
	n := int64(metaOverhead + 2*len(key) + len(m.URL) + len(m.Reason))
	n += fieldsLen(&m.Header) + fieldsLen(&m.Trailer)
	for _, t := range m.Tags {
		n += int64(len(t)) + 16
	}
	for _, v := range m.Vary {
		n += int64(len(v)) + 16
	}
	return n + m.Size
}

// fieldsLen is the length of h's fields in wire form.
func fieldsLen(h *h1.Header) int64 {
	var n int64
	for i := 0; i < h.Len(); i++ {
		n += int64(len(h.Name(i)) + len(h.Value(i)) + 4)
	}
	return n
}

// metaVersion is the first byte of an encoded Meta.
const metaVersion = 1

// MarshalBinary encodes m, for a store that writes it out (sluice's disk
// store; one a library user writes).
func (m *Meta) MarshalBinary() ([]byte, error) {
	b := []byte{metaVersion}
	var flags byte
	if m.Marker {
		flags |= 1
	}
	b = append(b, flags)
	b = appendString(b, m.URL)
	b = binary.AppendUvarint(b, uint64(len(m.Tags)))
	for _, t := range m.Tags {
		b = appendString(b, t)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Vary)))
	for _, v := range m.Vary {
		b = appendString(b, v)
	}
	b = binary.AppendUvarint(b, uint64(m.Status))
	b = appendString(b, m.Reason)
	b = appendBytes(b, m.Header.AppendTo(nil))
	b = appendBytes(b, m.Trailer.AppendTo(nil))
	b = binary.AppendVarint(b, m.RequestTime.UnixNano())
	b = binary.AppendVarint(b, m.ResponseTime.UnixNano())
	b = binary.AppendUvarint(b, uint64(m.Size))
	var discard int64
	if !m.Discard.IsZero() {
		discard = m.Discard.UnixNano()
	}
	b = binary.AppendVarint(b, discard)
	return b, nil
}

// errMeta is the error of an encoded Meta that does not decode.
var errMeta = errors.New("cache: malformed stored response metadata")

// UnmarshalBinary decodes what MarshalBinary encoded.
func (m *Meta) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if d.byte() != metaVersion {
		return fmt.Errorf("%w: unknown version", errMeta)
	}
	flags := d.byte()
	*m = Meta{Marker: flags&1 != 0}
	m.URL = d.string()
	for n := d.count(); n > 0 && d.ok(); n-- {
		m.Tags = append(m.Tags, d.string())
	}
	for n := d.count(); n > 0 && d.ok(); n-- {
		m.Vary = append(m.Vary, d.string())
	}
	status := d.uvarint()
	m.Reason = d.string()
	header := d.bytes()
	trailer := d.bytes()
	req, resp := d.varint(), d.varint()
	size := d.uvarint()
	discard := d.varint()
	if !d.ok() || len(d.b) != 0 || status > 999 || size > 1<<50 {
		return errMeta
	}
	m.Status, m.Size = int(status), int64(size)
	m.RequestTime, m.ResponseTime = time.Unix(0, req), time.Unix(0, resp)
	if discard != 0 {
		m.Discard = time.Unix(0, discard)
	}
	if err := parseFields(&m.Header, header); err != nil {
		return err
	}
	return parseFields(&m.Trailer, trailer)
}

// parseFields reads fields in wire form ("Name: value\r\n"...) into h.
func parseFields(h *h1.Header, wire []byte) error {
	if len(wire) == 0 {
		return nil
	}
	var r h1.Response
	raw := make([]byte, 0, len(wire)+19)
	raw = append(raw, "HTTP/1.1 200 OK\r\n"...)
	raw = append(raw, wire...)
	raw = append(raw, "\r\n"...)
	if err := h1.ParseResponse(&r, raw, 1<<16); err != nil {
		return fmt.Errorf("%w: %v", errMeta, err)
	}
	h.CopyFrom(&r.Header)
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads what MarshalBinary wrote; after a failure every read
// returns zero and ok reports false.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) ok() bool { return !d.bad }

func (d *decoder) byte() byte {
	if d.bad || len(d.b) == 0 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.bad {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.bad {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items, each at least a byte long.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad = true
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.bad || n > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) string() string { return string(d.bytes()) }
