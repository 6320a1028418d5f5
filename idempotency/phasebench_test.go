package idempotency_test

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/idempotency"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/retry"
	"github.com/sluice-proxy/sluice/route"
)

// benchBody is every benchmark POST's body: 60 bytes, as bench/idempotency
// sends.
const benchBody = `{"customer":1234,"item":"book-0042","quantity":1,"gift":fals`

// benchAnswer is the upstream's answer to each of them: 201 with 90 bytes.
const benchAnswer = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 90\r\n\r\n" +
	`{"order":"ord_8f14e45fceea167a5a36dedd4bea2543","status":"created","total":"12.5","x":"z"}`

// keyedPoster sends keyed POSTs on one kept-alive connection, each with a
// new key of the same length, and reads answers of a known length; it
// allocates nothing per request.
type keyedPoster struct {
	tb   testing.TB
	nc   net.Conn
	br   *bufio.Reader
	req  []byte
	at   int // where the key's digits are in req
	n    int64
	want int // the answer's length, learned from the first
}

// newKeyedPoster serves a proxy in front of a Canned upstream, with
// layer as its route's phase (none when nil), and returns a client of it.
func newKeyedPoster(tb testing.TB, layer *idempotency.Layer) *keyedPoster {
	opts := &proxy.PeerOptions{ResponseHeaderTimeout: 5 * time.Second, Retry: &retry.Policy{},
		Pool: &pool.Limits{MaxIdle: 16, IdleTimeout: time.Minute, Once: pool.Once{Mode: pool.Reuse, MaxIdle: time.Minute}}}
	var addr string
	if layer != nil {
		addr = serve(tb, layer, upstreamtest.Canned(tb, []byte(benchAnswer), len(benchBody), nil), opts)
	} else {
		addr = serveWithout(tb, upstreamtest.Canned(tb, []byte(benchAnswer), len(benchBody), nil), opts)
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	head := "POST /api/orders HTTP/1.1\r\nHost: shop.test\r\nContent-Type: application/json\r\nIdempotency-Key: order-"
	p := &keyedPoster{tb: tb, nc: nc, br: bufio.NewReaderSize(nc, 4096), at: len(head)}
	p.req = []byte(head + "000000000000\r\nContent-Length: " + strconv.Itoa(len(benchBody)) + "\r\n\r\n" + benchBody)
	p.want = -1
	p.post()
	return p
}

// post sends the next keyed POST and reads its answer, which must be 201.
func (p *keyedPoster) post() {
	p.n++
	for i, v := p.at+11, p.n; i >= p.at; i, v = i-1, v/10 {
		p.req[i] = byte('0' + v%10)
	}
	p.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := p.nc.Write(p.req); err != nil {
		p.tb.Fatal(err)
	}
	if p.want < 0 {
		// The first answer: its head, then Content-Length bytes.
		head, length := 0, 0
		for {
			line, err := p.br.ReadSlice('\n')
			if err != nil {
				p.tb.Fatal(err)
			}
			head += len(line)
			if len(line) <= 2 {
				break
			}
			if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
				length, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
			}
		}
		if _, err := p.br.Discard(length); err != nil {
			p.tb.Fatal(err)
		}
		p.want = head + length
		return
	}
	b, err := p.br.Peek(p.want)
	if err != nil {
		p.tb.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 201 ")) {
		p.tb.Fatalf("answer %q, want a 201", b)
	}
	p.br.Discard(p.want)
}

// serveWithout runs a proxy whose one route forwards to addr, without
// the layer.
func serveWithout(tb testing.TB, addr string, opts *proxy.PeerOptions) string {
	tbl := route.New(route.Route{Name: "api", Upstream: proxytest.Peer{P: &proxy.Peer{Addr: addr, Options: opts}}})
	return proxytest.Serve(tb, &proxy.Server{Handler: tbl, ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// BenchmarkPhase measures a keyed POST of 60 bytes answered 201 with 90
// bytes, through the proxy on one kept-alive client connection and a
// pooled upstream connection (client and upstream in this process, and
// counted): without the layer (plain), and with it and a local store
// (local), each request with a new key. The difference is what the layer
// costs a request forwarded under a claim: reading the body whole, the
// key and fingerprint, the claim, the answer recorded and kept.
func BenchmarkPhase(b *testing.B) {
	run := func(b *testing.B, l *idempotency.Layer) {
		p := newKeyedPoster(b, l)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			p.post()
		}
	}
	b.Run("plain", func(b *testing.B) { run(b, nil) })
	b.Run("local", func(b *testing.B) {
		run(b, newLayer(b, idempotency.Options{Store: idempotency.NewLocal(1<<22, 1<<32)}))
	})
}
