package h3

import (
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/quic-go/qpack"
)

// fieldOverhead is what each field counts beyond its name and value toward
// a field section's size (RFC 9114 §4.2.2, as HTTP/2's §6.5.2).
const fieldOverhead = 32

// decodeFields decodes a QPACK field section (static table only) into
// dst, stopping with a *StreamError of status 431's kind (errTooLarge)
// once the section's size passes max.
func decodeFields(dst []qpack.HeaderField, block []byte, max int) ([]qpack.HeaderField, error) {
	dec := qpack.NewDecoder()
	next := dec.Decode(block)
	size := 0
	for {
		f, err := next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return dst, nil
			}
			return dst, &ConnError{Code: ErrQPACKDecompress, Msg: err.Error()}
		}
		size += len(f.Name) + len(f.Value) + fieldOverhead
		if size > max {
			return dst, errTooLarge
		}
		dst = append(dst, f)
	}
}

// errTooLarge is a request field section over MaxHeaderList: answered 431.
var errTooLarge = &StreamError{Code: ErrExcessiveLoad, Msg: "field section over the limit"}

// connectionSpecific are the fields HTTP/3 forbids (RFC 9114 §4.2).
var connectionSpecific = []string{"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}

// checkRequest checks a request's field section (RFC 9114 §4.2, §4.3.1):
// lowercase names, pseudo-fields first, each of :method, :scheme,
// :authority and :path at most once, no other pseudo-field, :method
// present, :scheme and :path present but for CONNECT (which has neither,
// and an :authority), no connection-specific field, TE only "trailers",
// no CR, LF or NUL in a value. It returns the value of content-length, -1
// without one. A malformed request is a stream error H3_MESSAGE_ERROR.
func checkRequest(fields []qpack.HeaderField) (contentLength int64, err error) {
	var method, scheme, path, authority int
	var isConnect bool
	regular := false
	contentLength = -1
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") {
			if regular {
				return 0, malformed("pseudo-field " + f.Name + " after a regular field")
			}
			switch f.Name {
			case ":method":
				method++
				isConnect = f.Value == "CONNECT"
			case ":scheme":
				scheme++
			case ":path":
				path++
				if f.Value == "" {
					return 0, malformed("empty :path")
				}
			case ":authority":
				authority++
			default:
				return 0, malformed("unknown pseudo-field " + strconv.Quote(f.Name))
			}
			if !validValue(f.Value) {
				return 0, malformed("invalid value of " + f.Name)
			}
			continue
		}
		regular = true
		if !validName(f.Name) {
			return 0, malformed("invalid field name " + strconv.Quote(f.Name))
		}
		if !validValue(f.Value) {
			return 0, malformed("invalid value of " + f.Name)
		}
		for _, c := range connectionSpecific {
			if f.Name == c {
				return 0, malformed("connection-specific field " + f.Name)
			}
		}
		switch f.Name {
		case "te":
			if f.Value != "trailers" {
				return 0, malformed("te other than trailers")
			}
		case "content-length":
			n, err := strconv.ParseInt(f.Value, 10, 64)
			if err != nil || n < 0 || f.Value[0] == '+' {
				return 0, malformed("invalid content-length")
			}
			if contentLength >= 0 && contentLength != n {
				return 0, malformed("two content-lengths")
			}
			contentLength = n
		}
	}
	switch {
	case method != 1 || scheme > 1 || path > 1 || authority > 1:
		return 0, malformed("pseudo-fields missing or repeated")
	case isConnect && (scheme != 0 || path != 0 || authority != 1):
		return 0, malformed("CONNECT with :scheme or :path, or without :authority")
	case !isConnect && (scheme != 1 || path != 1):
		return 0, malformed("request without :scheme or :path")
	}
	return contentLength, nil
}

// checkTrailers checks a trailer section: no pseudo-field, and the rules
// of regular fields.
func checkTrailers(fields []qpack.HeaderField) error {
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") || !validName(f.Name) || !validValue(f.Value) {
			return malformed("invalid trailer field " + strconv.Quote(f.Name))
		}
	}
	return nil
}

func malformed(msg string) error { return &StreamError{Code: ErrMessage, Msg: msg} }

// validName reports whether name is a lowercase token (RFC 9110 §5.1,
// RFC 9114 §4.2).
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validValue reports whether v holds no CR, LF or NUL and does not begin
// or end with whitespace (RFC 9114 §4.2, RFC 9110 §5.5).
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' || c == 0 {
			return false
		}
	}
	return v == "" || (v[0] != ' ' && v[0] != '\t' && v[len(v)-1] != ' ' && v[len(v)-1] != '\t')
}
