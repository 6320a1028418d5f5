package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The HTTP/2 side is the least a Go HTTP/2 → HTTP/1.1 proxy built like
// sluice does per request: x/net's Framer and HPACK, a goroutine reading
// each connection, a goroutine per stream that takes a pooled upstream
// connection, writes the request, reads the answer and writes its frames
// under the connection's write lock, and writes that leave the flush to
// the last of the streams answering in the same round of the scheduler.
// It is a floor for bench/compare's HTTP/2 rows: what Go's runtime and
// crypto/tls cost before any of sluice's own work.
//
// It carries bodiless requests whose answers fit in the client's flow
// control windows (h2load's are 1 GiB), Content-Length framed; anything
// else resets the stream or ends the connection. No validation, no limits,
// no timeouts: it is not a server to expose.

// h2Window is the window the relay announces; it reads no request bodies.
const h2Window = 65535

var errH2Unsupported = errors.New("relay: beyond what the h2 relay carries")

type h2conn struct {
	r  *relay
	nc io.ReadWriteCloser

	wmu       sync.Mutex // guards the write side below
	bw        *bufio.Writer
	wfr       *http2.Framer
	enc       *hpack.Encoder
	hbuf      bytes.Buffer
	window    int64 // the connection's send window
	streamWin int64 // the peer's initial stream window
	werr      error

	running   atomic.Int32 // stream goroutines between request and answer
	uncorking atomic.Bool
}

// serveH2 serves an HTTP/2 connection, its preface not yet read.
func (r *relay) serveH2(nc io.ReadWriteCloser) {
	defer nc.Close()
	br := bufio.NewReaderSize(nc, 16<<10)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	c := &h2conn{r: r, nc: nc, window: 65535, streamWin: 65535}
	c.bw = bufio.NewWriterSize(nc, 16<<10)
	c.wfr = http2.NewFramer(c.bw, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	fr := http2.NewFramer(nil, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 64 << 10

	c.wmu.Lock()
	c.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 250},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2Window})
	c.flushLocked()
	c.wmu.Unlock()

	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if !f.StreamEnded() {
				c.control(func() error { return c.wfr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream) })
				continue
			}
			c.running.Add(1)
			go c.stream(f.StreamID, f.Fields)
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			c.control(func() error {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					c.streamWin = int64(v)
				}
				return c.wfr.WriteSettingsAck()
			})
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				c.control(func() error { return c.wfr.WritePing(true, data) })
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				inc := int64(f.Increment)
				c.control(func() error { c.window += inc; return nil })
			}
		case *http2.GoAwayFrame:
			return
		}
	}
}

// control writes a frame of the connection's own and flushes it.
func (c *h2conn) control(write func() error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr == nil {
		c.werr = write()
	}
	c.flushLocked()
}

func (c *h2conn) flushLocked() {
	if c.werr == nil {
		c.werr = c.bw.Flush()
	}
	if c.werr != nil {
		c.nc.Close()
	}
}

// h2Bufs are a stream's buffers, pooled: the HTTP/1.1 request, and the
// answer's head and body.
type h2Bufs struct{ req, head, body []byte }

var h2BufPool = sync.Pool{New: func() any {
	return &h2Bufs{req: make([]byte, 0, 1<<10), head: make([]byte, 0, 1<<10), body: make([]byte, 0, 4<<10)}
}}

// stream relays one request to the upstream and writes its answer.
func (c *h2conn) stream(id uint32, fields []hpack.HeaderField) {
	b := h2BufPool.Get().(*h2Bufs)
	defer h2BufPool.Put(b)
	status, err := c.exchange(b, fields)
	if err != nil {
		c.running.Add(-1)
		c.control(func() error { return c.wfr.WriteRSTStream(id, http2.ErrCodeInternal) })
		return
	}
	c.wmu.Lock()
	c.running.Add(-1)
	if c.werr == nil {
		c.werr = c.writeAnswer(id, status, b.head, b.body)
	}
	// Streams that are still running are likely to answer in this round
	// of the scheduler: leave the flush to a goroutine that runs after
	// them, so that one write carries their frames too.
	if c.werr == nil && c.running.Load() > 0 && c.bw.Buffered() < c.bw.Size()/2 {
		if c.uncorking.CompareAndSwap(false, true) {
			go c.uncork()
		}
		c.wmu.Unlock()
		return
	}
	c.flushLocked()
	c.wmu.Unlock()
}

func (c *h2conn) uncork() {
	runtime.Gosched()
	c.uncorking.Store(false)
	c.wmu.Lock()
	c.flushLocked()
	c.wmu.Unlock()
}

// exchange sends the request to the upstream and reads its answer: the
// head's field lines (status line and Connection dropped) into b.head, the
// body into b.body.
func (c *h2conn) exchange(b *h2Bufs, fields []hpack.HeaderField) (string, error) {
	var method, path, authority string
	for _, f := range fields {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			path = f.Value
		case ":authority":
			authority = f.Value
		}
	}
	req := append(append(append(append(append(b.req[:0], method...), ' '), path...), " HTTP/1.1\r\nHost: "...), authority...)
	req = append(req, "\r\n"...)
	for _, f := range fields {
		if !f.IsPseudo() {
			req = append(append(append(append(req, f.Name...), ": "...), f.Value...), "\r\n"...)
		}
	}
	req = append(req, "\r\n"...)
	b.req = req

	u, err := c.r.get()
	if err != nil {
		return "", err
	}
	if _, err := u.nc.Write(req); err != nil {
		u.nc.Close()
		return "", err
	}
	head, n, _, err := readHead(u.br, b.head[:0], false)
	b.head = head
	if err != nil {
		u.nc.Close()
		return "", err
	}
	if cap(b.body) < n {
		b.body = make([]byte, n)
	}
	b.body = b.body[:n]
	if _, err := io.ReadFull(u.br, b.body); err != nil {
		u.nc.Close()
		return "", err
	}
	c.r.put(u)
	i := bytes.IndexByte(head, '\n')
	if i < 12 {
		return "", errFraming
	}
	status := string(head[9:12])
	b.head = head[i+1:]
	return status, nil
}

// writeAnswer writes an answer's HEADERS and DATA frames. The write lock
// is held.
func (c *h2conn) writeAnswer(id uint32, status string, head, body []byte) error {
	if int64(len(body)) > min(c.window, c.streamWin) || len(body) > 16384 {
		log.Print(errH2Unsupported)
		return errH2Unsupported
	}
	c.hbuf.Reset()
	c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: status})
	for len(head) > 2 {
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			break
		}
		line := head[:i]
		head = head[i+1:]
		name, value, ok := bytes.Cut(bytes.TrimRight(line, "\r"), []byte(":"))
		if !ok || bytes.EqualFold(name, []byte("keep-alive")) {
			continue
		}
		c.enc.WriteField(hpack.HeaderField{Name: lowerName(name), Value: string(bytes.TrimSpace(value))})
	}
	if err := c.wfr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: len(body) == 0,
	}); err != nil || len(body) == 0 {
		return err
	}
	c.window -= int64(len(body))
	return c.wfr.WriteData(id, true, body)
}

// lowerName is a field name in lower case, the common ones without an
// allocation.
func lowerName(name []byte) string {
	for _, s := range [...]string{"server", "date", "content-type", "content-length", "last-modified", "etag", "accept-ranges"} {
		if len(s) == len(name) && bytes.EqualFold(name, []byte(s)) {
			return s
		}
	}
	return string(bytes.ToLower(name))
}

// h2Protos is the ALPN offer of a relay that serves HTTP/2 too.
var h2Protos = []string{"h2", "http/1.1"}

// isH2 reports whether ALPN settled on HTTP/2, handshaking first.
func isH2(c *tls.Conn) bool {
	if c.Handshake() != nil {
		return false
	}
	return c.ConnectionState().NegotiatedProtocol == "h2"
}
