package proxy

import (
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// Early data. A request that came in TLS early data (QUIC 0-RTT) may be a
// replay: anyone who captured the client's first flight can send it again,
// and the server cannot tell (RFC 8446 §8, RFC 9001 §9.2). A replayed
// connection never completes its handshake, so what arrived before the
// handshake completed is what may be one (Session.Early). sluice forwards
// such a request only when resending it is harmless, and says so upstream
// (RFC 8470 §5.1: Early-Data: 1, so that the origin may answer 425
// itself); any other is answered 425 Too Early, which the client repeats
// after the handshake (RFC 8470 §5.2). An upstream's 425 passes to the
// client as any answer does.

// earlySafe reports whether a request in early data may be forwarded: its
// method is one earlyMethod takes and it has no body.
func earlySafe(method string, f h1.Framing) bool {
	return earlyMethod(method) && f.Empty()
}

// earlyMethod reports whether a request in early data with this method
// may be forwarded, if it has no body: a safe one (RFC 9110 §9.2.1: GET,
// HEAD, OPTIONS). They are also the methods whose requests come without a
// body in practice, for which an HTTP/2 or HTTP/3 stream that did not end
// with its head is given bodyProbe to end before a body is assumed.
func earlyMethod(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS":
		return true
	}
	return false
}

// bodyProbe is how long a GET, HEAD or OPTIONS on an HTTP/2 or HTTP/3
// stream whose head did not end it may wait for the stream to end or
// carry DATA, before its body is taken to be of unknown length and sent
// chunked to an HTTP/1.1 upstream. Clients send the end in the next frame
// or packet, if not with the head; the wait costs nothing to a request
// that has a body (its DATA ends it) and spares upstreams a chunked GET.
const bodyProbe = 50 * time.Millisecond

// tooEarly is the answer to a request in early data that is not
// earlySafe.
var tooEarly = func() *Response {
	body := "425 Too Early: this request came in TLS early data (0-RTT), which may be replayed; send it again\n"
	r := &Response{Status: 425, Body: []byte(body)}
	r.Header.Add("Content-Type", "text/plain; charset=utf-8")
	r.Header.Add("Cache-Control", "no-store")
	r.Header.Add("Proxy-Status", `sluice; error=http_request_error; details="unsafe request in early data"`)
	return r
}()
