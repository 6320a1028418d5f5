package accesslog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// Handler is a slog.Handler that writes each record as one line of a
// Format, followed by a newline. A field the record does not have (an
// upstream for a request sluice answered itself, say), or has empty, is
// written "-", as nginx writes an empty variable; $peer, which the record
// has only when it differs from the client, is the client's then. Text
// from the request is escaped as nginx escapes it by default: '"', '\'
// and bytes below 0x20 or above 0x7e become \xHH, so that a line stays
// one line and its quotes stay its own.
//
// Attributes under a group (WithGroup) are no field. A Handler is safe for
// concurrent use; each line goes to the writer in one Write, under a lock.
type Handler struct {
	f       *Format
	level   slog.Leveler
	pre     []slog.Attr // WithAttrs's, before the record's
	grouped bool
	out     *output
}

type output struct {
	mu sync.Mutex
	w  io.Writer
}

// NewHandler returns a Handler writing lines of f to w, for records at
// level or above (nil: slog.LevelInfo, the access log's).
func NewHandler(w io.Writer, f *Format, level slog.Leveler) *Handler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &Handler{f: f, level: level, out: &output{w: w}}
}

// Enabled reports whether l is at the Handler's level or above.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

// WithAttrs returns a Handler whose lines have attrs as fields, unless a
// record's own attributes say otherwise.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if h.grouped || len(attrs) == 0 {
		return h
	}
	h2 := *h
	h2.pre = append(h.pre[:len(h.pre):len(h.pre)], attrs...)
	return &h2
}

// WithGroup returns a Handler whose records' attributes are no field:
// they are in a group, and fields are not.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.grouped = true
	return &h2
}

// bufs hold lines being written.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooled is the largest buffer kept for the next line: a line with a
// huge target does not keep its buffer.
const maxPooled = 64 << 10

// values are a record's fields, by field; set has a bit for each there.
type values struct {
	v   [lastAttr + 1]slog.Value
	set uint64
}

func (vs *values) add(a slog.Attr, uses uint64) {
	if f, ok := attrField(a.Key); ok && uses&(1<<f) != 0 {
		vs.v[f] = a.Value
		vs.set |= 1 << f
	}
}

func (vs *values) has(f field) bool { return vs.set&(1<<f) != 0 }

// Handle writes r as a line.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	var vs values
	uses := h.f.collect
	for _, a := range h.pre {
		vs.add(a, uses)
	}
	if !h.grouped {
		r.Attrs(func(a slog.Attr) bool {
			vs.add(a, uses)
			return true
		})
	}
	bp := bufs.Get().(*[]byte)
	b := (*bp)[:0]
	for i := range h.f.parts {
		p := &h.f.parts[i]
		b = append(b, p.lit...)
		if p.has {
			b = h.appendField(b, p.field, &vs, &r)
		}
	}
	b = append(b, '\n')
	h.out.mu.Lock()
	_, err := h.out.w.Write(b)
	h.out.mu.Unlock()
	if cap(b) <= maxPooled {
		*bp = b
		bufs.Put(bp)
	}
	return err
}

// appendField appends field f of a record: its time, level or message,
// or an attribute of it (vs).
func (h *Handler) appendField(b []byte, f field, vs *values, r *slog.Record) []byte {
	switch f {
	case fTime:
		// As slog's JSON and text handlers write it.
		return r.Time.AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	case fTimeISO8601:
		return r.Time.AppendFormat(b, time.RFC3339)
	case fTimeLocal:
		return r.Time.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	case fMsec:
		ms := r.Time.UnixMilli()
		b = strconv.AppendInt(b, ms/1000, 10)
		b = append(b, '.', byte('0'+ms/100%10), byte('0'+ms/10%10), byte('0'+ms%10))
		return b
	case fLevel:
		return append(b, r.Level.String()...)
	case fMsg:
		return appendEscaped(b, r.Message)
	case fRequest:
		// nginx's request line: the method, target and protocol.
		if !vs.has(fMethod) {
			return append(b, '-')
		}
		b = appendValue(b, vs.v[fMethod])
		b = append(b, ' ')
		b = appendValue(b, vs.v[fTarget])
		if vs.has(fProtocol) {
			b = append(b, ' ')
			b = appendValue(b, vs.v[fProtocol])
		}
		return b
	case fPeer:
		if !vs.has(fPeer) {
			f = fClient
		}
	}
	if !vs.has(f) {
		return append(b, '-')
	}
	return appendValue(b, vs.v[f])
}

// appendValue appends v as a field: "-" when empty.
func appendValue(b []byte, v slog.Value) []byte {
	switch v.Kind() {
	case slog.KindString:
		s := v.String()
		if s == "" {
			return append(b, '-')
		}
		return appendEscaped(b, s)
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool())
	case slog.KindFloat64:
		return strconv.AppendFloat(b, v.Float64(), 'f', -1, 64)
	case slog.KindDuration:
		return strconv.AppendFloat(b, v.Duration().Seconds(), 'f', 6, 64)
	case slog.KindTime:
		return v.Time().AppendFormat(b, time.RFC3339)
	}
	// A group, or a value of a Logger hook's own: rare, and it may
	// allocate.
	s := fmt.Sprint(v.Resolve().Any())
	if s == "" {
		return append(b, '-')
	}
	return appendEscaped(b, s)
}

// appendEscaped appends s with '"', '\' and bytes outside 0x20..0x7e as
// \xHH, as nginx's log_format escape=default does.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			b = append(b, '\\', 'x', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// attrField returns the field an attribute of a record is, by its key.
func attrField(key string) (field, bool) {
	switch key {
	case "client":
		return fClient, true
	case "peer":
		return fPeer, true
	case "method":
		return fMethod, true
	case "host":
		return fHost, true
	case "target":
		return fTarget, true
	case "status":
		return fStatus, true
	case "bytes_in":
		return fBytesIn, true
	case "bytes_out":
		return fBytesOut, true
	case "duration":
		return fDuration, true
	case "protocol":
		return fProtocol, true
	case "request_id":
		return fRequestID, true
	case "route":
		return fRoute, true
	case "upstream_name":
		return fUpstreamName, true
	case "upstream":
		return fUpstream, true
	case "upstream_status":
		return fUpstreamStatus, true
	case "reused":
		return fReused, true
	case "tries":
		return fTries, true
	case "stale_resends":
		return fStaleResends, true
	case "error":
		return fError, true
	case "aborted":
		return fAborted, true
	case "tls":
		return fTLS, true
	case "sni":
		return fSNI, true
	case "user_agent":
		return fUserAgent, true
	case "referer":
		return fReferer, true
	case "access":
		return fAccess, true
	case "body_limit":
		return fBodyLimit, true
	case "compressed":
		return fCompressed, true
	case "rate_limited":
		return fRateLimited, true
	case "rate_limit_store":
		return fRateLimitStore, true
	case "static":
		return fStatic, true
	case "stripped":
		return fStripped, true
	case "rewritten":
		return fRewritten, true
	case "user":
		return fUser, true
	case "basic_auth":
		return fBasicAuth, true
	case "forward_auth":
		return fForwardAuth, true
	case "idempotency":
		return fIdempotency, true
	case "cache":
		return fCache, true
	}
	return 0, false
}
