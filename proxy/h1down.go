package proxy

import (
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// An HTTP/1.1 client connection is the downstream of the requests it
// carries, one at a time: their bodies are read off it as they came
// (chunked framing passed on where the upstream speaks HTTP/1.1 too), and
// their responses are written as HTTP/1.1 bytes, a head and what is at
// hand of the body in one write.

// h1Request is the request body of an HTTP/1.1 client: read as it came,
// its chunked framing marked (h1.Body.Data).
type h1Request struct {
	h1Body
	c       *conn
	chunked bool
}

func (b *h1Request) framed() bool                { return b.chunked }
func (b *h1Request) limit(n int64)               { b.b.Limit(n) }
func (b *h1Request) setReadDeadline(t time.Time) { b.c.setReadDeadline(t) }
func (b *h1Request) mustDrain() bool             { return true }

// prefetch reads what the socket holds of the body's rest into the read
// buffer, which may be smaller than head and body, without waiting.
func (b *h1Request) prefetch(n int64) {
	r := &b.c.r
	need := int(n) + r.Buffered()
	for int64(r.Buffered()) < n {
		if _, err := r.FillWith(b.c.ready.Reader(), need); err != nil {
			return
		}
	}
}

func (c *conn) framing(f h1.Framing) h1.Framing { return f }

// body readies the request body, kept in the Session: an idle connection
// holds none.
func (c *conn) body(f h1.Framing) requestBody {
	rb := &c.s.h1req
	rb.c, rb.r, rb.chunked = c, &c.r, f.Kind == h1.Chunked
	rb.b.Init(&c.r, f, false, c.srv.maxHeaderBytes())
	return rb
}

func (c *conn) interim(resp *h1.Response) error {
	if c.s.Request.Minor == 0 {
		// RFC 9110 §15.2: an HTTP/1.0 client cannot read 1xx responses.
		return nil
	}
	stripHopByHop(&resp.Header, false)
	w := h1.AppendResponse(c.wbuf[:0], resp)
	c.wbuf = w[:0]
	return c.write(w)
}

func (c *conn) takesChunked() bool { return c.s.Request.Minor >= 1 }

// respond writes the final head into the write buffer, its framing and
// connection fields made to fit the client: a body of unknown length goes
// chunked to an HTTP/1.1 client (framed here), until the connection closes
// to an HTTP/1.0 one.
func (c *conn) respond(resp *h1.Response, out outBody) {
	s := c.s
	h := &resp.Header
	c.chunking = false
	switch {
	case out.none, out.chunked:
	case out.length >= 0:
		if !h.Has("Content-Length") {
			h.Add("Content-Length", strconv.FormatInt(out.length, 10))
		}
	case out.untilClose:
		s.keepAlive = false
	default:
		if h.Has("Transfer-Encoding") {
			h.Del("Transfer-Encoding")
		}
		if s.Request.Minor >= 1 {
			h.Add("Transfer-Encoding", "chunked")
			c.chunking = true
		} else {
			s.keepAlive = false
		}
	}
	if s.srv.Draining() {
		s.keepAlive = false
	}
	switch {
	case !s.keepAlive:
		h.Set("Connection", "close")
	case s.Request.Minor == 0:
		h.Set("Connection", "keep-alive")
	}
	c.wbuf = h1.AppendResponse(c.wbuf[:0], resp)
}

func (c *conn) buffer(p []byte) {
	if c.chunking {
		c.wbuf = appendChunk(c.wbuf, p)
		return
	}
	c.wbuf = append(c.wbuf, p...)
}

// appendChunk appends p as one chunk (nothing when p is empty: an empty
// chunk would end the body).
func appendChunk(w, p []byte) []byte {
	if len(p) == 0 {
		return w
	}
	w = strconv.AppendInt(w, int64(len(p)), 16)
	w = append(w, "\r\n"...)
	w = append(w, p...)
	return append(w, "\r\n"...)
}

func (c *conn) held() int { return len(c.wbuf) }

func (c *conn) send(p []byte, end bool, trailers *h1.Header) error {
	w := c.wbuf
	var err error
	switch {
	case len(p) == 0:
	case len(w)+len(p) <= maxCopied || c.chunking && len(p) <= maxCopied:
		// A small piece goes in the same write as what is held.
		c.wbuf = w
		c.buffer(p)
		w = c.wbuf
	case c.chunking:
		w = append(strconv.AppendInt(w, int64(len(p)), 16), "\r\n"...)
		c.wbuf = w[:0]
		err = c.writev(w, p, crlf)
		w = c.wbuf
	case len(w) > 0:
		// What is held (the head, say) and a large piece, uncopied, in
		// one system call: the head does not leave in a packet of its own.
		c.wbuf = w[:0]
		err = c.writev(w, p)
		w = c.wbuf
	default:
		err = c.write(p)
	}
	if err == nil && end && c.chunking {
		w = appendLastChunk(w, trailers)
	}
	if err == nil && len(w) > 0 {
		err = c.write(w)
	}
	c.wbuf = w[:0]
	if end && !c.s.keepAlive && c.s.ownAnswer {
		// sluice answered and closes while the client may still be
		// sending: see linger.
		c.linger = true
	}
	return err
}

// writev writes the pieces in one system call where the connection allows
// (a TCP socket; over TLS each is a record). The pieces are listed in the
// Session, so that the call allocates nothing, and dropped after it: a
// stored body is not held past its send.
func (c *conn) writev(pieces ...[]byte) error {
	c.writeDeadline()
	s := c.s
	s.bufs = append(s.iov[:0], pieces...)
	n, err := s.bufs.WriteTo(c.nc)
	s.BytesOut += n
	s.iov, s.bufs = [3][]byte{}, nil
	return err
}

// sendFile writes what is held (the head, and the file's first bytes
// buffered with it) and then the file body: with sendfile over a plain TCP
// connection, corked from the held bytes to the file's end (cork), so that
// the head leaves in a full segment with the first of the file rather than
// in a packet of its own; by copying otherwise.
func (c *conn) sendFile(fb *FileBody) error {
	w := c.wbuf
	c.wbuf = w[:0]
	tc, ok := c.nc.(*net.TCPConn)
	if !ok {
		if len(w) > 0 {
			if err := c.write(w); err != nil {
				return err
			}
		}
		return copyFile(fb, c.write)
	}
	if _, err := fb.File.Seek(fb.Offset, io.SeekStart); err != nil {
		return &fileError{err}
	}
	if len(w) > 0 {
		if cork(tc, true) {
			defer cork(tc, false)
		}
		if err := c.write(w); err != nil {
			return err
		}
	}
	// TCPConn.ReadFrom sends an *io.LimitedReader of an *os.File with
	// sendfile(2), from the file's offset.
	lr := &io.LimitedReader{R: fb.File}
	for left := fb.Size; left > 0; {
		lr.N = min(left, fileChunk)
		c.writeDeadline()
		n, err := tc.ReadFrom(lr)
		c.s.BytesOut += n
		left -= n
		switch {
		case err != nil:
			return err
		case n == 0:
			return &fileError{nil}
		}
	}
	return nil
}

// tunnel relays the 101 response and then copies bytes both ways until
// both sides have finished. The upstream connection is never reused.
func (c *conn) tunnel(resp *h1.Response, up net.Conn, buffered []byte) error {
	s := c.s
	stripHopByHop(&resp.Header, true)
	resp.Header.Set("Connection", "Upgrade")
	w := h1.AppendResponse(c.wbuf[:0], resp)
	c.wbuf = w[:0]
	if err := c.write(w); err != nil {
		return err
	}
	s.Upgraded = true
	s.keepAlive = false
	client := c.nc
	client.SetDeadline(time.Time{})
	c.writeBy = time.Time{}
	up.SetDeadline(time.Time{})

	// Bytes that arrived behind the heads belong to the new protocol.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if len(buffered) > 0 {
			n, _ := client.Write(buffered)
			s.BytesOut += int64(n)
		}
		n, _ := io.Copy(client, up)
		s.BytesOut += n
		closeWrite(client)
	}()
	if b := c.r.Peek(); len(b) > 0 {
		up.Write(b)
		s.BytesIn += int64(len(b))
		c.r.Discard(len(b))
	}
	n, _ := io.Copy(up, client)
	s.BytesIn += n
	closeWrite(up)
	// The client is done (or gone, or cut by Shutdown): the upstream gets
	// a moment to finish its side, not forever.
	up.SetReadDeadline(time.Now().Add(tunnelGrace))
	wg.Wait()
	up.Close()
	return nil
}

// tunnelGrace bounds how long a tunnel's upstream side may go on after the
// client's side ended.
const tunnelGrace = 10 * time.Second

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// abort has the connection reset once the request is logged, never closed
// with a FIN, which a client reading a close-delimited body (HTTP/1.0, or
// no Content-Length) would take for the end of a complete response.
func (c *conn) abort() { c.reset = true }

// gone is false: an HTTP/1.1 client that goes away is found by the next
// write or read.
func (c *conn) gone() bool { return false }
