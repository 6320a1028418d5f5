package idempotency

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/sluice-proxy/sluice/h1"
)

// Answer is a response as the layer keeps and replays it, or one the
// layer makes itself (409, 422, 400, 502, 503): a status, ordered header
// fields with their spelling, a body and trailer fields. It is a plain
// value of this package, for any wire: the engine writes it as it writes
// its own answers (framing, Content-Length and Connection are the
// engine's).
//
// The Answers Begin returns are the caller's, but their Body may alias a
// store's copy of a kept answer: read it, never write to it.
type Answer struct {
	Status int
	// Reason is the HTTP/1.1 reason phrase the upstream sent, kept so
	// that a replay over HTTP/1.1 is the first answer byte for byte; ""
	// for the layer's own answers (the engine writes the status's
	// standard phrase).
	Reason  string
	Header  h1.Header
	Body    []byte
	Trailer h1.Header
}

// answerMagic starts an encoded Answer, with the format's version.
var answerMagic = [3]byte{'S', 'I', 1}

// size returns the most bytes a's encoding may take: its strings, and
// the longest uvarint for each number.
func (a *Answer) size() int {
	const u = binary.MaxVarintLen64
	n := len(answerMagic) + 5*u + len(a.Reason) + len(a.Body)
	for _, h := range []*h1.Header{&a.Header, &a.Trailer} {
		for i := 0; i < h.Len(); i++ {
			n += len(h.Name(i)) + len(h.Value(i)) + 2*u
		}
	}
	return n
}

// Encode appends a's encoding to dst, the form a store keeps: a magic
// and version, the status, the reason, the fields, the body and the
// trailer fields, each string preceded by its length (uvarint).
func (a *Answer) Encode(dst []byte) []byte {
	dst = append(dst, answerMagic[:]...)
	dst = binary.AppendUvarint(dst, uint64(a.Status))
	dst = appendPart(dst, a.Reason)
	dst = appendFields(dst, &a.Header)
	dst = appendPart(dst, a.Body)
	return appendFields(dst, &a.Trailer)
}

func appendFields(dst []byte, h *h1.Header) []byte {
	dst = binary.AppendUvarint(dst, uint64(h.Len()))
	for i := 0; i < h.Len(); i++ {
		dst = appendPart(dst, h.Name(i))
		dst = appendPart(dst, h.Value(i))
	}
	return dst
}

// errEncoding is DecodeAnswer's error for bytes that are not an answer.
var errEncoding = errors.New("idempotency: a kept answer that does not decode")

// maxDecodedFields bounds the fields of a decoded answer's header or
// trailers: a record that claims more is not an answer.
const maxDecodedFields = 10_000

// DecodeAnswer reads an answer Encode wrote. The answer's Body aliases b;
// its fields are copies. Bytes that are not an encoded answer (a
// corrupt or foreign record) give an error, never a panic.
func DecodeAnswer(b []byte) (*Answer, error) {
	if len(b) < len(answerMagic) || [3]byte(b[:3]) != answerMagic {
		return nil, errEncoding
	}
	d := decoder{b: b[len(answerMagic):]}
	a := new(Answer)
	status := d.uvarint()
	if status < 100 || status > 999 {
		return nil, errEncoding
	}
	a.Status = int(status)
	a.Reason = string(d.part())
	d.fields(&a.Header)
	a.Body = d.part()
	d.fields(&a.Trailer)
	if d.bad || len(d.b) != 0 {
		return nil, errEncoding
	}
	if len(a.Body) == 0 {
		a.Body = nil
	}
	return a, nil
}

type decoder struct {
	b       []byte
	bad     bool
	scratch [binary.MaxVarintLen64]byte
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	// Only the shortest form, as Encode writes: one answer, one encoding.
	if n <= 0 || n != len(binary.AppendUvarint(d.scratch[:0], v)) {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) part() []byte {
	n := d.uvarint()
	if d.bad || n > uint64(len(d.b)) {
		d.bad = true
		d.b = nil
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) fields(h *h1.Header) {
	n := d.uvarint()
	if n > maxDecodedFields {
		d.bad = true
		return
	}
	for ; n > 0 && !d.bad; n-- {
		name := d.part()
		value := d.part()
		if !d.bad {
			h.AddBytes(name, value)
		}
	}
}

// hopByHop are the fields a kept answer leaves out: they describe one
// connection (RFC 9110 §7.6.1), and the replay's connection is another.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "TE", "Upgrade"}

// appendEndToEnd appends to dst, as Encode writes an answer's fields
// (their count, then each name and value), the fields of src that are
// end to end: all but hopByHop and those that src's Connection fields
// name. It returns the new dst and what the fields add to Answer.size.
func appendEndToEnd(dst []byte, src *h1.Header) ([]byte, int) {
	conn := false // src has a Connection field, which may name others
	for i := 0; i < src.Len() && !conn; i++ {
		conn = h1.EqualFold(src.Name(i), "Connection")
	}
	// The count first, in one byte while it is below 128 (as it is but
	// for answers of that many fields, which move their fields to make
	// room for its other bytes).
	at := len(dst)
	dst = append(dst, 0)
	n, size := 0, 0
	for i := 0; i < src.Len(); i++ {
		name := src.Name(i)
		if isHopByHop(name) || conn && namedByConnection(src, name) {
			continue
		}
		n++
		size += len(name) + len(src.Value(i)) + 2*binary.MaxVarintLen64
		dst = appendPart(dst, name)
		dst = appendPart(dst, src.Value(i))
	}
	var count [binary.MaxVarintLen64]byte
	c := binary.AppendUvarint(count[:0], uint64(n))
	if extra := len(c) - 1; extra > 0 {
		dst = append(dst, c[1:]...) // room
		copy(dst[at+len(c):], dst[at+1:len(dst)-extra])
	}
	copy(dst[at:], c)
	return dst, size
}

// hopLengths has bit n set when a name of hopByHop is n bytes long.
var hopLengths = func() (m uint64) {
	for _, h := range hopByHop {
		m |= 1 << len(h)
	}
	return m
}()

// isHopByHop reports whether name is one of hopByHop; most names are
// told apart by their length alone.
func isHopByHop(name []byte) bool {
	if len(name) >= 64 || hopLengths&(1<<len(name)) == 0 {
		return false
	}
	for _, h := range hopByHop {
		if h1.EqualFold(name, h) {
			return true
		}
	}
	return false
}

func namedByConnection(h *h1.Header, name []byte) bool {
	for i := 0; i < h.Len(); i++ {
		if !h1.EqualFold(h.Name(i), "Connection") {
			continue
		}
		for v := h.Value(i); len(v) > 0; {
			var item []byte
			item, v = h1.CutList(v)
			if len(item) == len(name) && h1.EqualFold(item, string(name)) {
				return true
			}
		}
	}
	return false
}

// ReplayedHeader is the field a replayed answer carries, with the value
// "true": the name Stripe's API gives it.
const ReplayedHeader = "Idempotent-Replayed"

// replay returns the kept answer to send again: the kept one, with
// ReplayedHeader added last.
func replay(a *Answer) *Answer {
	a.Header.Add(ReplayedHeader, "true")
	return a
}

// A problem is one of the answers the layer makes itself.
type problem struct {
	status     int
	errorType  string // the Proxy-Status error type (RFC 9209 §2.3)
	name       string // the problem type's name: its type URI's fragment
	title      string
	retryAfter string // "" for none
}

// ProblemBase is where the problem types of the layer's answers are
// documented: each type is ProblemBase followed by its name, a fragment
// of the README's section.
const ProblemBase = "https://github.com/sluice-proxy/sluice/blob/main/README.md#"

var (
	problemMissing = &problem{400, "http_request_error", "idempotency-key-missing",
		"Idempotency-Key is missing", ""}
	problemInvalid = &problem{400, "http_request_error", "idempotency-key-invalid",
		"Idempotency-Key is not valid", ""}
	problemInFlight = &problem{409, "http_request_denied", "idempotency-key-in-use",
		"A request with this Idempotency-Key is being processed", "1"}
	problemNotKept = &problem{409, "http_request_denied", "idempotency-answer-not-kept",
		"The answer to this Idempotency-Key was not kept", ""}
	problemMismatch = &problem{422, "http_request_denied", "idempotency-key-reused",
		"This Idempotency-Key was used with another request", ""}
	problemUnknown = &problem{502, "http_response_incomplete", "idempotency-outcome-unknown",
		"The outcome of the request with this Idempotency-Key is unknown", ""}
	problemStore = &problem{503, "proxy_internal_error", "idempotency-store-unavailable",
		"The idempotency store is unavailable", "1"}
)

// answer makes the problem's answer (RFC 9457 problem details, with a
// Proxy-Status field, RFC 9209), detail saying what happened.
func (p *problem) answer(detail string) *Answer {
	a := &Answer{Status: p.status}
	var b strings.Builder
	b.WriteString(`{"type":`)
	b.WriteString(jsonString(ProblemBase + p.name))
	b.WriteString(`,"title":`)
	b.WriteString(jsonString(p.title))
	b.WriteString(`,"status":`)
	b.WriteString(strconv.Itoa(p.status))
	b.WriteString(`,"detail":`)
	b.WriteString(jsonString(detail))
	b.WriteString("}\n")
	a.Body = []byte(b.String())
	a.Header.Grow(4, 160+len(detail))
	a.Header.Add("Content-Type", "application/problem+json")
	a.Header.Add("Cache-Control", "no-store")
	if p.retryAfter != "" {
		a.Header.Add("Retry-After", p.retryAfter)
	}
	a.Header.Add("Proxy-Status", "sluice; error="+p.errorType+"; details="+sfString(detail))
	return a
}

// jsonString quotes s as a JSON string (RFC 8259 §7). The layer's details
// are its own ASCII text; anything else is escaped all the same.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// sfString writes s as a Structured Field String (RFC 8941 §3.3.3): '"'
// and '\' escaped, bytes outside printable ASCII left out (they cannot
// be written in one).
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
