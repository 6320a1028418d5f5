package proxy

import (
	"errors"
	"strconv"
	"sync/atomic"

	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/h1"
)

// streamAnswer is what the exchanges of HTTP/2 and HTTP/3 streams share of
// a response, whose wires differ only in how the pieces are written: the
// fields, in HTTP/2's form (lowercase names, no connection-specific
// ones), the final head held back until the first body bytes so that a
// small response leaves in one write, the body bytes held with it, and
// whether the stream was cut.
type streamAnswer struct {
	fields  []hpack.HeaderField
	pending bool // the final head is to go with the next send
	ended   bool // the response ended
	pay     []byte
	seen    *interned   // the strings of field values lately sent (apart: its 512 bytes are not copied at each reset)
	severed atomic.Bool // the stream was reset; the drain timeout may do it from another goroutine
}

// resetAnswer readies a for the next stream, keeping its buffers and no
// strings of the last response.
func (a *streamAnswer) resetAnswer() streamAnswer {
	clear(a.fields[:cap(a.fields)])
	seen := a.seen
	if seen == nil {
		seen = new(interned)
	}
	return streamAnswer{fields: a.fields[:0], pay: a.pay[:0], seen: seen}
}

// interimFields sets the fields of an interim (1xx) response; a 101 cannot
// go to a client of proto.
func (a *streamAnswer) interimFields(resp *h1.Response, proto string) error {
	if resp.Status == 101 {
		return errors.New("proxy: 101 Switching Protocols cannot go to an " + proto + " client")
	}
	a.fields = appendFields(a.fields[:0], resp, a.seen)
	return nil
}

// respond sets the final head's fields, held for the first send; a body
// of known length gets its content-length.
func (a *streamAnswer) respond(resp *h1.Response, out outBody) {
	a.fields = appendFields(a.fields[:0], resp, a.seen)
	if !out.none && out.length >= 0 && !resp.Header.Has("Content-Length") {
		a.fields = append(a.fields, hpack.HeaderField{Name: "content-length", Value: strconv.FormatInt(out.length, 10)})
	}
	a.pending = true
	a.pay = a.pay[:0]
}

func (a *streamAnswer) buffer(p []byte) { a.pay = append(a.pay, p...) }

func (a *streamAnswer) held() int { return len(a.pay) }

// take returns the body bytes to send now: those held, then p.
func (a *streamAnswer) take(p []byte) []byte {
	body := a.pay
	switch {
	case len(p) == 0:
	case len(body) == 0:
		body = p
	default:
		a.pay = append(a.pay, p...)
		body = a.pay
	}
	a.pay = a.pay[:0]
	return body
}

// answerWire writes the pieces of a response to a stream of one wire.
type answerWire interface {
	// writeHead writes the final head and body, ending the stream with
	// end.
	writeHead(fields []hpack.HeaderField, body []byte, end bool) error
	Write(body []byte) (int, error)
	End() error                                     // ends the stream after the body
	writeTrailers(fields []hpack.HeaderField) error // ends it with trailers
}

// write sends p, after what is held, to w: the held head with it, if any;
// with end, then the stream's end, or the trailers. What it sends counts
// in *out.
func (a *streamAnswer) write(w answerWire, out *int64, p []byte, end bool, trailers *h1.Header) error {
	body := a.take(p)
	endData := end && (trailers == nil || trailers.Len() == 0)
	*out += int64(len(body))
	if a.pending {
		a.pending = false
		*out += int64(headSize(a.fields))
		if err := w.writeHead(a.fields, body, endData); err != nil {
			return a.writeErr(err)
		}
	} else {
		if len(body) > 0 {
			if _, err := w.Write(body); err != nil {
				return a.writeErr(err)
			}
		}
		if endData {
			if err := w.End(); err != nil {
				return a.writeErr(err)
			}
		}
	}
	if end && !endData {
		a.fields = appendHeader(a.fields[:0], trailers, a.seen)
		if err := w.writeTrailers(a.fields); err != nil {
			return a.writeErr(err)
		}
	}
	a.ended = end
	return nil
}

// writeErr is err, after which nothing more of the response can go: the
// stream is cut.
func (a *streamAnswer) writeErr(err error) error {
	if err != nil {
		a.severed.Store(true)
	}
	return err
}

// bodyRoom bounds a request body read from a stream: limit sets the room,
// charge takes from it.
type bodyRoom struct {
	limited bool
	room    int64
}

func (b *bodyRoom) limit(n int64) {
	if n < 0 || b.limited && n >= b.room {
		return
	}
	b.limited, b.room = true, n
}

// charge takes n bytes read from the room: h1.ErrBodyTooLarge past it.
func (b *bodyRoom) charge(n int) error {
	if b.limited {
		if int64(n) > b.room {
			return h1.ErrBodyTooLarge
		}
		b.room -= int64(n)
	}
	return nil
}
