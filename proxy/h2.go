package proxy

import (
	"bytes"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/h2"
)

// HTTP/2 from clients. A connection whose TLS handshake settled on h2, or
// that opens with the HTTP/2 preface on a listener that takes h2c, is
// served by the h2 engine; each of its streams becomes a Session like an
// HTTP/1.1 request, its downstream the stream itself (h2exchange,
// h2down.go): the main line, hooks, retries, balancing, access log and
// Proxy-Status do not change with the protocol.

// h2Preface is the start of the HTTP/2 client connection preface (RFC 9113
// §3.4), which an HTTP/1.1 reader sees as a request head of its own.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// isPreface reports whether the head buffered in r is the HTTP/2 preface.
func isPreface(r *h1.Reader) bool {
	return bytes.HasPrefix(r.Peek(), []byte(h2Preface[:16]))
}

// runH2 serves the connection as HTTP/2 until it ends, and closes it, or
// until it idles parkAfter, when the parker takes it (as it takes an idle
// HTTP/1.1 connection) and the goroutine ends: an idle HTTP/2 connection
// then costs its memory, not a goroutine's stack too. The parker starts a
// goroutine for it again (conn.serve calls runH2) when the client sends
// or closes, at its idle timeout, or as the server shuts down, and the
// engine goes on from where it stopped. The first goroutine is one of its
// own, started with the smallest stack, not the one that made the TLS
// handshake (whose stack grew for it). prefix holds what was read of the
// connection already (the preface, on a cleartext listener).
func (c *conn) runH2(prefix []byte) {
	parked := false
	defer func() {
		if v := recover(); v != nil {
			parked = false
			c.recovered(v)
		}
		if !parked {
			c.close()
			c.srv.forget(c)
		}
	}()
	hc := c.h2.Load()
	if hc == nil {
		hc = c.startH2(prefix)
	}
	for hc.Serve() == h2.ErrIdle {
		if c.park(hc.IdleDeadline()) {
			parked = true // the parker owns the connection now
			return
		}
	}
}

// startH2 makes the HTTP/2 engine of the connection.
func (c *conn) startH2(prefix []byte) *h2.Conn {
	srv := c.srv
	settings := srv.H2
	settings.IdleTimeout = srv.idleTimeout()
	if srv.parker != nil && settings.IdleTimeout > parkAfter {
		settings.ParkAfter = parkAfter
	}
	if settings.ErrorLog == nil {
		settings.ErrorLog = srv.ErrorLog
	}
	c.nc.SetDeadline(time.Time{})
	c.writeBy = time.Time{}
	hc := h2.NewConn(c.nc, prefix, &settings, c.serveStream)
	c.h2.Store(hc)
	if srv.Draining() {
		// Shutdown began before the engine was there to be told.
		hc.Shutdown()
	}
	return hc
}

// takePreface takes what was read of a connection that opened with the
// HTTP/2 preface, and reports whether it is to be served as HTTP/2 (on a
// listener that takes h2c). Elsewhere it tells the client, in HTTP/2, that
// the listener speaks HTTP/1.1 only (GOAWAY with HTTP_1_1_REQUIRED), rather
// than answering in a protocol it does not read.
func (c *conn) takePreface() (prefix []byte, ok bool) {
	prefix = append([]byte(nil), c.r.Peek()...)
	c.r.Discard(len(prefix))
	c.r.Release()
	c.giveBack()
	if c.ln != nil && c.ln.h2c {
		return prefix, true
	}
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	fr := http2.NewFramer(c.nc, nil)
	fr.WriteSettings()
	fr.WriteGoAway(0, http2.ErrCodeHTTP11Required, []byte("this listener speaks HTTP/1.1 only"))
	c.linger = true
	return nil, false
}
