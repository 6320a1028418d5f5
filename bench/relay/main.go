// Command relay is the least a Go HTTP/1.1 reverse proxy does per request,
// for bench/compare to measure as "go-relay": a goroutine per client
// connection, reads and writes through Go's netpoller, a pool of kept-alive
// upstream connections, Content-Length framing, and nothing else: no
// validation, no retries, no timeouts, no headers added. Between it and
// nginx is what Go's runtime costs; between sluice and it is what sluice's
// own work costs.
//
// It understands only what the benchmark sends: requests and responses
// framed by Content-Length (or without a body), and Connection: close from
// the client. It is not a proxy to use.
//
// With -cert and -key it serves TLS 1.3 with Go's crypto/tls as it comes
// (tls.NewListener, automatic session tickets): the least a Go proxy pays
// for TLS, beside which sluice's TLS figures can be read. There it offers
// HTTP/2 too (ALPN), carried the least way as well (h2.go).
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"log"
	"net"
	"strconv"
	"sync"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	upstream := flag.String("upstream", "127.0.0.1:9000", "upstream address")
	certFile := flag.String("cert", "", "PEM `file` of the certificate chain: serve TLS 1.3 (with -key)")
	keyFile := flag.String("key", "", "PEM `file` of the certificate's key")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	if *certFile != "" || *keyFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			log.Fatal(err)
		}
		ln = tls.NewListener(ln, serverTLS(cert))
	}
	r := &relay{upstream: *upstream, idle: make(chan *upConn, 256)}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Print(err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go r.accept(c)
	}
}

// serverTLS is the relay's TLS: TLS 1.3, h2 or http/1.1 by ALPN,
// crypto/tls's defaults otherwise.
func serverTLS(cert tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, NextProtos: h2Protos}
}

// accept serves a client connection: as HTTP/2 when ALPN chose h2, as
// HTTP/1.1 otherwise.
func (r *relay) accept(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok && isH2(tc) {
		r.serveH2(c)
		return
	}
	r.serve(c)
}

type relay struct {
	upstream string
	idle     chan *upConn
}

type upConn struct {
	nc net.Conn
	br *bufio.Reader
}

func (r *relay) get() (*upConn, error) {
	select {
	case u := <-r.idle:
		return u, nil
	default:
	}
	nc, err := net.Dial("tcp", r.upstream)
	if err != nil {
		return nil, err
	}
	return &upConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}, nil
}

func (r *relay) put(u *upConn) {
	select {
	case r.idle <- u:
	default:
		u.nc.Close()
	}
}

// connBufs are a client connection's buffers, pooled so that a connection
// per request does not make garbage.
type connBufs struct {
	br   *bufio.Reader
	head []byte
	buf  []byte
}

var bufPool = sync.Pool{New: func() any {
	return &connBufs{br: bufio.NewReaderSize(nil, 4<<10), head: make([]byte, 0, 4<<10), buf: make([]byte, 64<<10)}
}}

func (r *relay) serve(c net.Conn) {
	defer c.Close()
	bufs := bufPool.Get().(*connBufs)
	defer bufPool.Put(bufs)
	bufs.br.Reset(c)
	defer bufs.br.Reset(nil)
	br, head, buf := bufs.br, bufs.head, bufs.buf
	for {
		var err error
		var reqLen int
		var closing bool
		head, reqLen, closing, err = readHead(br, head[:0], false)
		if err != nil {
			return
		}
		u, err := r.get()
		if err != nil {
			return
		}
		hl := len(head)
		head = appendBuffered(head, br, reqLen)
		if err := send(u.nc, br, head, reqLen-(len(head)-hl), buf); err != nil {
			u.nc.Close()
			return
		}
		var respLen int
		head, respLen, _, err = readHead(u.br, head[:0], closing)
		if err != nil {
			u.nc.Close()
			return
		}
		hl = len(head)
		head = appendBuffered(head, u.br, respLen)
		if err := send(c, u.br, head, respLen-(len(head)-hl), buf); err != nil {
			u.nc.Close()
			return
		}
		r.put(u)
		if closing {
			return
		}
	}
}

var errFraming = errors.New("relay: unsupported framing")

// readHead appends a message head from br to dst without its Connection
// field (adding "Connection: close" when closing is set) and returns its
// Content-Length and whether it asked to close.
func readHead(br *bufio.Reader, dst []byte, closing bool) ([]byte, int, bool, error) {
	length, asked := 0, false
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return dst, 0, false, err
		}
		if len(line) <= 2 && !first {
			if closing {
				dst = append(dst, "Connection: close\r\n"...)
			}
			return append(dst, line...), length, asked, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		switch {
		case first || !ok:
		case bytes.EqualFold(name, []byte("Connection")):
			asked = bytes.Contains(bytes.ToLower(value), []byte("close"))
			continue
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil || length < 0 {
				return dst, 0, false, errFraming
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return dst, 0, false, errFraming
		}
		dst = append(dst, line...)
	}
}

// appendBuffered appends the part of a body of length n already in br, so
// that a small message leaves in one write.
func appendBuffered(dst []byte, br *bufio.Reader, n int) []byte {
	if k := min(n, br.Buffered()); k > 0 && len(dst)+k <= cap(dst) {
		b, _ := br.Peek(k)
		dst = append(dst, b...)
		br.Discard(k)
	}
	return dst
}

// send writes msg (a head and what was buffered of its body) and copies
// the left bytes of the body from br.
func send(w net.Conn, br *bufio.Reader, msg []byte, left int, buf []byte) error {
	if _, err := w.Write(msg); err != nil {
		return err
	}
	for left > 0 {
		k, err := br.Read(buf[:min(left, len(buf))])
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return werr
			}
			left -= k
		}
		if err != nil {
			return err
		}
	}
	return nil
}
