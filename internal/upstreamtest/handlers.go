package upstreamtest

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// OK answers every request with 200 and body, framed by Content-Length, and
// keeps the connection open.
func OK(body string) Handler { return Status(200, body) }

// Status answers every request with code and body, framed by Content-Length
// (see Conn.Respond), and keeps the connection open.
func Status(code int, body string) Handler {
	return func(c *Conn, r *Request) { c.Respond(code, body) }
}

// Echo answers every request with 200 whose body is the request's decoded
// body, and which carries the request's X-Request-Id field, if any.
func Echo() Handler {
	return func(c *Conn, r *Request) {
		var h []Field
		if id := r.Get("X-Request-Id"); id != "" {
			h = append(h, Field{"X-Request-Id", id})
		}
		c.Respond(200, string(r.Decoded), h...)
	}
}

// AnswerFirstThenDrop answers the first request of each connection with 200
// and body "conn N" (N the connection number), keeping the connection open,
// and closes the connection (FIN) without answering on the next request:
// the upstream that closed a pooled connection just as the proxy reused it.
func AnswerFirstThenDrop() Handler { return DropReused(false) }

// DropReused is AnswerFirstThenDrop, except that it resets the connection
// (RST) instead of closing it when reset is true.
func DropReused(reset bool) Handler {
	return func(c *Conn, r *Request) {
		switch {
		case r.Seq == 1:
			c.Respond(200, fmt.Sprintf("conn %d", c.N()))
		case reset:
			c.Reset()
		default:
			c.Close()
		}
	}
}

// ResetAfterRead reads each request and resets the connection (RST) without
// answering.
func ResetAfterRead() Handler {
	return func(c *Conn, r *Request) { c.Reset() }
}

// Silent reads the first request of each connection and never answers; the
// connection stays open until the server is closed.
func Silent() Handler {
	return func(c *Conn, r *Request) { c.Silence() }
}

// GarbageStatus answers with "garbage\r\n\r\n", a status line that is not
// HTTP, and closes the connection.
func GarbageStatus() Handler {
	return func(c *Conn, r *Request) {
		c.WriteString("garbage\r\n\r\n")
		c.Close()
	}
}

// NoColonHeader answers with a valid status line, a field line without a
// colon and a 2-byte body:
//
//	HTTP/1.1 200 OK\r\nContent-Length: 2\r\nBadHeaderWithoutColon\r\n\r\nok
//
// and keeps the connection open.
func NoColonHeader() Handler {
	return Raw("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nBadHeaderWithoutColon\r\n\r\nok")
}

// Truncated answers with a head announcing Content-Length: 100, then only 2
// bytes of body, and closes the connection.
func Truncated() Handler {
	return func(c *Conn, r *Request) {
		c.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nab")
		c.Close()
	}
}

// Raw answers every request with exactly response, whatever it holds, and
// keeps the connection open.
func Raw(response string) Handler {
	return func(c *Conn, r *Request) { c.WriteString(response) }
}

// CloseIdleAfter wraps inner so that the server closes the connection (FIN)
// when no byte of a next request arrives within d after a response, like an
// upstream's keep-alive timeout. The timeout starts counting after the
// connection's first request. See Conn.SetIdleTimeout.
func CloseIdleAfter(d time.Duration, inner Handler) Handler {
	return func(c *Conn, r *Request) {
		c.SetIdleTimeout(d)
		inner.orOK()(c, r)
	}
}

// KeepAliveTimeout is CloseIdleAfter that also announces the timeout:
// responses written with Conn.Respond (as by OK, Status, Echo) carry
// "Keep-Alive: timeout=N", N being d in whole seconds, at least 1. Raw
// responses are not changed.
func KeepAliveTimeout(d time.Duration, inner Handler) Handler {
	secs := max(int(d/time.Second), 1)
	return func(c *Conn, r *Request) {
		c.SetIdleTimeout(d)
		c.announceField(Field{"Keep-Alive", fmt.Sprintf("timeout=%d", secs)})
		inner.orOK()(c, r)
	}
}

// Continue turns h into a StreamHandler that honours Expect: 100-continue:
// it sends "HTTP/1.1 100 Continue" before reading the body of a request
// that expects it, then reads the whole body and calls h.
func Continue(h Handler) StreamHandler {
	rest := h.stream()
	return func(c *Conn, r *Request, body io.Reader) {
		if strings.EqualFold(r.Get("Expect"), "100-continue") {
			c.Respond(100, "")
		}
		rest(c, r, body)
	}
}

// orOK returns h, or OK("") for a nil h.
func (h Handler) orOK() Handler {
	if h == nil {
		return OK("")
	}
	return h
}
