package upstreamtest

import (
	"bytes"
	"slices"
	"strings"
)

// Request is one request as the upstream read it.
type Request struct {
	Conn int // 1-based number of the connection it arrived on, in accept order
	Seq  int // 1-based position on that connection

	Method string
	Target string // the request-target exactly as sent
	Proto  string // "HTTP/1.1" or "HTTP/1.0"

	Header  []Field // field lines in arrival order, names as spelled on the wire
	Trailer []Field // trailer fields of a chunked body, in arrival order

	// RawHead is the head exactly as received: any empty lines before the
	// request line, the request line, the field lines and the empty line
	// that ends the head, with their original line ends.
	RawHead []byte
	// RawBody is the body exactly as received: for a chunked body, chunk-size
	// lines, extensions, CRLFs, the last chunk and the trailer section too.
	RawBody []byte
	// Decoded is the body's content, chunked framing removed.
	Decoded []byte
	// Complete reports that the whole body arrived. It is false when the
	// connection ended inside the body, or a StreamHandler closed, reset or
	// silenced the connection before the body was all read.
	Complete bool
}

// Field is one header or trailer field line: its name as spelled on the
// wire and its value without surrounding whitespace.
type Field struct{ Name, Value string }

// Get returns the value of the first header field named name, compared
// case-insensitively, or "" if there is none.
func (r Request) Get(name string) string {
	for _, f := range r.Header {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// wantsClose reports whether the request asks the server to close the
// connection after the response (RFC 9112 §9.3): "Connection: close", or
// HTTP/1.0 without "Connection: keep-alive".
func (r *Request) wantsClose() bool {
	closing, keep := false, false
	for _, f := range r.Header {
		if !strings.EqualFold(f.Name, "Connection") {
			continue
		}
		for opt := range strings.SplitSeq(f.Value, ",") {
			opt = strings.TrimSpace(opt)
			closing = closing || strings.EqualFold(opt, "close")
			keep = keep || strings.EqualFold(opt, "keep-alive")
		}
	}
	return closing || (r.Proto == "HTTP/1.0" && !keep)
}

// clone returns a copy of r that shares no memory with it.
func (r *Request) clone() Request {
	c := *r
	c.Header = slices.Clone(r.Header)
	c.Trailer = slices.Clone(r.Trailer)
	c.RawHead = bytes.Clone(r.RawHead)
	c.RawBody = bytes.Clone(r.RawBody)
	c.Decoded = bytes.Clone(r.Decoded)
	return c
}
