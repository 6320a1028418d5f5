package proxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// The exchange. The main line (session.go, attempt.go, body.go, relay.go,
// answer.go) reads a request as a parsed head (Session.Request) and a body
// (requestBody), and writes its response as heads, body segments, trailers,
// an end or an abort (downstream). Toward the server, each try sends the
// head and the body and reads the response's heads and body (upstream).
// Each wire implements its side at its edge, and the main line never asks
// which it holds:
//
//	downstream  conn         an HTTP/1.1 client connection (h1down.go)
//	            h2exchange   a stream of an HTTP/2 client connection (h2down.go)
//	upstream    h1up         a pooled HTTP/1.1 connection (h1up.go)
//	            h2up         a stream of an HTTP/2 connection (h2up.go)
//
// No wire speaks another wire's text to the main line: an HTTP/2 stream is
// not turned into HTTP/1.1 bytes to be parsed again, nor an HTTP/2
// response. HTTP/1.1's byte-exactness (a chunked body passed on as it came,
// chunk extensions, trailers and all) is a matter between two HTTP/1.1
// wires: a body read off an HTTP/1.1 wire comes as it came, its segments
// marked data or framing (bodyReader.data), and an HTTP/1.1 writer passes
// it on as it is where the framing allows, while every other writer takes
// the data and frames it its own way.

// bodyReader is a message body as a wire delivers it: the request's from
// the client's side, the response's from a try's upstream side. It is used
// by one goroutine at a time.
type bodyReader interface {
	// next returns the body's next segment, valid until the next call on
	// the reader. It returns io.EOF at the end, with the body's last
	// segment or after it. After any other error (a deadline that passed,
	// say) it may be called again to go on where it stopped.
	next() ([]byte, error)
	// data reports whether the segment next returned last is data rather
	// than HTTP/1.1 chunked framing (which only a body passed on as it
	// came off an HTTP/1.1 wire has).
	data() bool
	// ready reports whether next would return without waiting.
	ready() bool
	// done reports whether next has returned the body's last segment.
	done() bool
	// buffered returns how many bytes have arrived that next has not
	// returned yet.
	buffered() int
	// addTrailers adds the body's trailer fields to h, once next returned
	// io.EOF.
	addTrailers(h *h1.Header)
}

// requestBody is the client's side of a request body.
type requestBody interface {
	bodyReader
	// framed reports whether the segments come in HTTP/1.1 chunked
	// framing, as the client sent them (marked by data).
	framed() bool
	// limit bounds the body's data to n bytes (Session.LimitBody): at the
	// segment that would take it past n, next fails with
	// h1.ErrBodyTooLarge, having returned at most n bytes of data.
	limit(n int64)
	// setReadDeadline bounds the wait for the body's next bytes.
	setReadDeadline(t time.Time)
	// prefetch takes in what has arrived of a body of n bytes, without
	// waiting, so that ready reports it (reqBody.preread).
	prefetch(n int64)
	// mustDrain reports whether the rest of a body the upstream did not
	// wait for must be read off the client's connection for it to carry
	// another request (HTTP/1.1), rather than being refused with the
	// exchange (an HTTP/2 stream's).
	mustDrain() bool
}

// outBody says how the body of a response a downstream writes comes.
type outBody struct {
	// length is the number of data bytes to come; -1 when it is not
	// known ahead.
	length int64
	// chunked is set when the bytes come in HTTP/1.1 chunked framing, as
	// an HTTP/1.1 upstream sent them, to be passed on as they are; only
	// for a downstream that takesChunked.
	chunked bool
	// untilClose is set when the body's end is the upstream closing its
	// connection (HTTP/1.1 framing by close): an HTTP/1.1 client gets it
	// the same way.
	untilClose bool
	// none is set when no body follows, whatever the fields say (HEAD,
	// 204, 304): a downstream then adds nothing that says how long it is.
	none bool
}

// downstream is the client's side of one exchange: where the request body
// comes from and where the response goes. An HTTP/1.1 connection (conn)
// and an HTTP/2 stream (h2exchange) implement it. Its methods are called
// from the Session's goroutine, but for the request body's, which the body
// pump calls while it runs.
type downstream interface {
	// framing returns the request body's framing, given f, the framing
	// its head says (h1.ValidateRequest): an HTTP/2 stream knows better.
	framing(f h1.Framing) h1.Framing
	// body readies the request body, whose framing is f, and returns it.
	body(f h1.Framing) requestBody

	// interim sends an interim (1xx) response head.
	interim(resp *h1.Response) error
	// takesChunked reports whether the client's wire can carry an
	// HTTP/1.1 chunked body as it came (outBody.chunked).
	takesChunked() bool
	// respond begins the final response: resp's head, its body to come as
	// out says. Nothing need be sent until send. The downstream may
	// change resp's framing and connection fields.
	respond(resp *h1.Response, out outBody)
	// buffer appends body bytes to what the next send sends, copying them.
	buffer(p []byte)
	// held returns how many body bytes buffer holds.
	held() int
	// send sends the head if it has not gone yet, what buffer holds, and
	// p, which is not copied. With end the response ends, with trailers
	// (nil: none) where the wire carries them.
	send(p []byte, end bool, trailers *h1.Header) error
	// sendFile sends what send has not sent yet (the head, and what
	// buffer holds), then the body of a file answer.
	sendFile(fb *FileBody) error
	// tunnel relays the 101 response resp and then the bytes of the new
	// protocol both ways between the client and up, the upstream's
	// connection (whose bytes already read are in buffered), until both
	// sides have finished.
	tunnel(resp *h1.Response, up net.Conn, buffered []byte) error
	// abort ends a response that cannot be finished: the client sees that
	// it was cut (a reset), never a response that looks whole.
	abort()
	// gone reports whether the client gave the exchange up (reset its
	// stream) while its response was under way.
	gone() bool
}

// upstream is a try's side of the exchange toward the server: a pooled
// HTTP/1.1 connection (h1up) or a stream of an HTTP/2 connection (h2up).
// The body pump calls body, end and setWriteDeadline while the Session's
// goroutine reads the response; cut may be called from any goroutine.
type upstream interface {
	// send writes the request head, and after it first, the start of the
	// body as the client's side gave it (framed: in HTTP/1.1 chunked
	// framing, see requestBody.framed). When end is set first is the
	// whole body, trailers its trailers, and the wait for the response
	// begins (within the response-header timeout). It returns the bytes
	// written (the head's included).
	send(req *h1.Request, f h1.Framing, framed bool, first []byte, end bool, trailers *h1.Header) (int64, error)
	// body sends a segment of the request body; data false marks HTTP/1.1
	// chunked framing, which a wire that does not carry it drops.
	body(seg []byte, data bool) (int, error)
	// end sends the body's last segment (perhaps empty) and ends the
	// body, with its trailers (nil: none), and the wait for the response
	// begins.
	end(seg []byte, data bool, trailers *h1.Header) (int, error)
	setWriteDeadline(t time.Time)
	// setReadDeadline bounds the wait for the response (the pump sets the
	// response-header timeout as the body ends).
	setReadDeadline(t time.Time)

	// head reads the next response head into resp: interim (1xx) or
	// final. For the final one it works out how its body comes (out).
	head(resp *h1.Response) error
	// read returns the response bytes read on this try so far.
	read() int64
	// out returns how the final response's body comes; reusable reports
	// whether the connection can carry another request after it.
	out() (o outBody, reusable bool)
	// response returns the final response's body, its data only when
	// decode is set, each wait for it bounded by timeout.
	response(decode bool, timeout time.Duration) bodyReader

	// finish ends the try after a complete exchange, the connection kept
	// for another request when keep is set.
	finish(keep bool)
	// drop ends the try's use of the connection after a failure: it can no
	// longer be trusted to be at a message boundary.
	drop()
	// died tells the pool that the try found the connection closed by its
	// server while it idled in the pool (retry.Stale).
	died()
	// cut sets the deadline of every wait on the try to t (the drain
	// timeout).
	cut(t time.Time)
	// abandon ends the try's waits because the client gave the exchange
	// up: at once where that costs nothing (an HTTP/2 stream is reset),
	// within cancelGrace where cutting would cost the connection (an
	// HTTP/1.1 one, which an answer that comes whole in that time keeps
	// pooled).
	abandon()
	// hijack hands over the connection for a tunnel (101), with the bytes
	// already read from it; nil when the wire cannot be taken over.
	hijack() (net.Conn, []byte)
}

// flight holds the try in flight of an exchange, where Shutdown and a
// client's reset find it to cut its waits short.
type flight struct {
	mu sync.Mutex
	up upstream
	// whole is set while a tee wants the response whole (Session.Tee): a
	// client that gives up does not end the try then.
	whole atomic.Bool
}

// set makes up the try in flight (nil: none). Under mu, a cut cannot
// touch a connection the Session has let go of (to the pool, where
// another request may have it).
func (f *flight) set(up upstream) {
	f.mu.Lock()
	f.up = up
	f.mu.Unlock()
}

// cut cuts the waits of the try in flight, if any, at t.
func (f *flight) cut(t time.Time) {
	f.mu.Lock()
	if f.up != nil {
		f.up.cut(t)
	}
	f.mu.Unlock()
}

// abandon abandons the try in flight, if any (upstream.abandon), unless a
// tee wants its response whole.
func (f *flight) abandon() {
	if f.whole.Load() {
		return
	}
	f.mu.Lock()
	if f.up != nil {
		f.up.abandon()
	}
	f.mu.Unlock()
}

// cancelGrace is how long the wait for an HTTP/1.1 upstream goes on after
// the client reset its stream (an HTTP/2 upstream's stream is reset at
// once: its connection is not at stake). An answer that comes whole within
// it goes nowhere, but its connection goes back to the pool (the relay
// releases it before writing to the client); a connection cut while a
// request is on it can only be closed. Browsers reset streams often (a
// navigation, a prefetch not needed), and each reset cost a new upstream
// connection. A wait longer than this ends as before, as the client's
// fault.
var cancelGrace = 100 * time.Millisecond
