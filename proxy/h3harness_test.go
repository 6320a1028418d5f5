package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
)

// h3harness is a proxy serving HTTP/3 on a QUICSocket on 127.0.0.1:0.
type h3harness struct {
	*harness
	site *tlsSite
	qs   *QUICSocket
	done chan struct{}
}

// startH3 runs a proxy for h serving HTTP/3 until the test ends; opts
// tweaks the socket's options (0-RTT, limits).
func startH3(t testing.TB, h Handler, opts func(*QUICOptions), tweak ...func(*Server)) *h3harness {
	t.Helper()
	site := newSite(t)
	hs := &harness{errors: &logBuffer{}, access: &logBuffer{}}
	hs.srv = &Server{
		Handler:   h,
		ErrorLog:  slog.New(slog.NewTextHandler(hs.errors, &slog.HandlerOptions{Level: slog.LevelDebug})),
		AccessLog: slog.New(slog.NewTextHandler(hs.access, nil)),
	}
	for _, f := range tweak {
		f(hs.srv)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	o := QUICOptions{TLS: site.server()}
	if opts != nil {
		opts(&o)
	}
	qs, err := ListenQUIC(pc, o)
	if err != nil {
		t.Fatal(err)
	}
	hs.addr = pc.LocalAddr().String()
	h3 := &h3harness{harness: hs, site: site, qs: qs, done: make(chan struct{})}
	go func() {
		defer close(h3.done)
		hs.srv.ServeQUIC(qs.Handoff(), ListenerOptions{})
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.srv.Shutdown(ctx)
		<-h3.done
		qs.Close()
		pc.Close()
		if t.Failed() {
			t.Logf("error log:\n%s", hs.errors)
		}
	})
	return h3
}

// clientTLS is a client config for the site that speaks h3 and keeps
// session tickets in cache (for 0-RTT).
func (h *h3harness) clientTLS(cache tls.ClientSessionCache) *tls.Config {
	return &tls.Config{ServerName: "example.com", RootCAs: h.site.ca.Pool(), NextProtos: []string{"h3"},
		ClientSessionCache: cache}
}

// dial opens a QUIC connection to addr, its handshake complete.
func dialH3(t testing.TB, addr string, cfg *tls.Config, early bool) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var qc *quic.Conn
	var err error
	if early {
		qc, err = quic.DialAddrEarly(ctx, addr, cfg, &quic.Config{})
	} else {
		qc, err = quic.DialAddr(ctx, addr, cfg, &quic.Config{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	return qc
}

// h3resp is a response read off a request stream.
type h3resp struct {
	status int
	header map[string]string
	body   []byte
}

// h3Request sends a request on a new stream of qc (its fields with
// lowercase names) and reads the response. It writes no control stream:
// a server must serve requests without one.
func h3Request(qc *quic.Conn, method, path string, body []byte, fields ...string) (*h3resp, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := qc.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	st.SetDeadline(time.Now().Add(5 * time.Second))
	hf := []qpack.HeaderField{{Name: ":method", Value: method}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "example.com"}, {Name: ":path", Value: path}}
	for i := 0; i+1 < len(fields); i += 2 {
		hf = append(hf, qpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	b := appendH3Headers(nil, hf)
	if body != nil {
		b = appendH3Frame(b, 0x00, body)
	}
	if _, err := st.Write(b); err != nil {
		return nil, err
	}
	st.Close()
	return readH3Response(st)
}

func appendH3Headers(b []byte, fields []qpack.HeaderField) []byte {
	var block bytes.Buffer
	enc := qpack.NewEncoder(&block)
	for _, f := range fields {
		enc.WriteField(f)
	}
	return appendH3Frame(b, 0x01, block.Bytes())
}

func appendH3Frame(b []byte, typ uint64, payload []byte) []byte {
	b = quicvarint.Append(b, typ)
	b = quicvarint.Append(b, uint64(len(payload)))
	return append(b, payload...)
}

// readH3Response reads the frames of a response: interim heads skipped,
// the final head, DATA, trailers ignored, until the stream ends.
func readH3Response(st io.Reader) (*h3resp, error) {
	r := bufio.NewReader(st)
	resp := &h3resp{header: map[string]string{}}
	for {
		typ, err := quicvarint.Read(r)
		if err == io.EOF {
			if resp.status == 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return resp, nil
		}
		if err != nil {
			return resp, err
		}
		n, err := quicvarint.Read(r)
		if err != nil {
			return resp, err
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return resp, err
		}
		switch typ {
		case 0x00:
			resp.body = append(resp.body, p...)
		case 0x01:
			if resp.status >= 200 {
				continue // trailers
			}
			dec := qpack.NewDecoder().Decode(p)
			h := map[string]string{}
			for {
				f, err := dec()
				if err != nil {
					break
				}
				h[f.Name] = f.Value
			}
			resp.status, _ = strconv.Atoi(h[":status"])
			if resp.status >= 200 {
				resp.header = h
			}
		}
	}
}

// appErr returns the application error code qc was closed with, once it
// is closed.
func appErr(t testing.TB, qc *quic.Conn) (uint64, bool) {
	t.Helper()
	select {
	case <-qc.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the connection was not closed")
	}
	var ae *quic.ApplicationError
	if errors.As(context.Cause(qc.Context()), &ae) {
		return uint64(ae.ErrorCode), true
	}
	return 0, false
}

// notingCache is a session cache that says when it got a ticket.
type notingCache struct {
	tls.ClientSessionCache
	once sync.Once
	got  chan struct{}
}

func newNotingCache() *notingCache {
	return &notingCache{ClientSessionCache: tls.NewLRUClientSessionCache(8), got: make(chan struct{})}
}

func (c *notingCache) Put(key string, cs *tls.ClientSessionState) {
	c.ClientSessionCache.Put(key, cs)
	if cs != nil {
		c.once.Do(func() { close(c.got) })
	}
}

// relay is a UDP relay between one QUIC client and the proxy, which can
// hold the client's datagrams that carry its handshake's end (Handshake
// or 1-RTT packets) until released, keep the client's first flight
// (Initial and 0-RTT) for a replay, and count what the server sends.
type relay struct {
	t          testing.TB
	pc         *net.UDPConn // the client's side
	up         *net.UDPConn // toward the server
	mu         sync.Mutex
	client     *net.UDPAddr
	hold       bool
	held       [][]byte
	first      [][]byte // the client's datagrams before any Handshake packet
	sawEarly   chan struct{}
	earlyOnce  sync.Once
	forward    bool // forward the client's datagrams at all
	retries    int  // Retry packets the server sent
	fromServer int  // bytes the server sent
	toServer   int  // bytes forwarded to it
}

func newRelay(t testing.TB, server string, forward, hold bool) *relay {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	sa, _ := net.ResolveUDPAddr("udp", server)
	up, err := net.DialUDP("udp", nil, sa)
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{t: t, pc: pc, up: up, hold: hold, forward: forward, sawEarly: make(chan struct{})}
	t.Cleanup(func() { pc.Close(); up.Close() })
	go r.fromClient()
	go r.fromServerLoop()
	return r
}

func (r *relay) addr() string { return r.pc.LocalAddr().String() }

func (r *relay) fromClient() {
	buf := make([]byte, 2048)
	for {
		n, a, err := r.pc.ReadFromUDP(buf)
		if err != nil {
			return
		}
		d := append([]byte(nil), buf[:n]...)
		types := packetTypes(d)
		r.mu.Lock()
		r.client = a
		late := types[2] || types[4] // Handshake, or 1-RTT
		if !late && len(r.held) == 0 {
			r.first = append(r.first, d)
		}
		if types[1] {
			r.earlyOnce.Do(func() { close(r.sawEarly) })
		}
		if r.hold && late {
			r.held = append(r.held, d)
			r.mu.Unlock()
			continue
		}
		fwd := r.forward
		if fwd {
			r.toServer += len(d)
		}
		r.mu.Unlock()
		if fwd {
			r.up.Write(d)
		}
	}
}

func (r *relay) fromServerLoop() {
	buf := make([]byte, 2048)
	for {
		n, err := r.up.Read(buf)
		if err != nil {
			return
		}
		types := packetTypes(buf[:n])
		r.mu.Lock()
		r.fromServer += n
		if types[3] {
			r.retries++
		}
		a := r.client
		r.mu.Unlock()
		if a != nil {
			r.pc.WriteToUDP(buf[:n], a)
		}
	}
}

// release stops holding, and sends what was held.
func (r *relay) release() {
	r.mu.Lock()
	held := r.held
	r.held, r.hold = nil, false
	r.mu.Unlock()
	for _, d := range held {
		r.up.Write(d)
	}
}

// packetTypes reports which kinds of QUIC v1 packets a datagram holds
// (coalesced long header packets walked by their length): [0] Initial,
// [1] 0-RTT, [2] Handshake, [3] Retry, [4] 1-RTT.
func packetTypes(d []byte) (kinds [5]bool) {
	for len(d) > 0 {
		if d[0]&0x80 == 0 {
			kinds[4] = true
			return
		}
		typ := (d[0] >> 4) & 3
		kinds[typ] = true
		if typ == 3 || len(d) < 6 {
			return
		}
		p := d[5:]
		dcid := int(p[0])
		if len(p) < 1+dcid+1 {
			return
		}
		p = p[1+dcid:]
		scid := int(p[0])
		if len(p) < 1+scid {
			return
		}
		p = p[1+scid:]
		if typ == 0 {
			tl, n, err := quicvarint.Parse(p)
			if err != nil || uint64(len(p)-n) < tl {
				return
			}
			p = p[n+int(tl):]
		}
		l, n, err := quicvarint.Parse(p)
		if err != nil || uint64(len(p)-n) < l {
			return
		}
		d = p[n+int(l):]
	}
	return
}

// replay sends the client's first flight again to server, from a socket
// of its own, and returns that socket (whose answers nobody reads).
func (r *relay) replay(t testing.TB, server string) {
	t.Helper()
	sa, _ := net.ResolveUDPAddr("udp", server)
	c, err := net.DialUDP("udp", nil, sa)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r.mu.Lock()
	first := r.first
	r.mu.Unlock()
	for _, d := range first {
		c.Write(d)
	}
}
