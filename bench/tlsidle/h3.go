package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
)

// openIdleH3 opens n QUIC connections to addr's HTTP/3 socket, 200 at a
// time, all from one UDP socket of this process, each after one GET; they
// stay open as long as the process (an idle timeout of 10 minutes), or
// until socket, which closes the socket, is closed after them.
func openIdleH3(ctx context.Context, addr string, cfg *tls.Config, n int) (conns []io.Closer, socket io.Closer, failed int, first error) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, nil, 0, err
	}
	tr := &quic.Transport{Conn: udp}
	socket = closerFunc(func() error { tr.Close(); return udp.Close() })
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, socket, 0, err
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200)
	for range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			qc, err := openOneH3(ctx, tr, ua, cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if first == nil {
					first = err
				}
				return
			}
			conns = append(conns, closerFunc(func() error { return qc.CloseWithError(0, "") }))
		}()
	}
	wg.Wait()
	return conns, socket, failed, first
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// openOneH3 opens a QUIC connection on tr, opens the three
// unidirectional streams a browser opens (control, with its SETTINGS, and
// QPACK's encoder and decoder streams), and sends one GET on a request
// stream, reading its response to the end.
func openOneH3(ctx context.Context, tr *quic.Transport, addr net.Addr, cfg *tls.Config) (*quic.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	qc, err := tr.Dial(dctx, addr, cfg, &quic.Config{MaxIdleTimeout: 10 * time.Minute})
	if err != nil {
		return nil, err
	}
	for _, b := range [][]byte{{0x00, 0x04, 0x00}, {0x02}, {0x03}} { // control + empty SETTINGS, encoder, decoder
		u, err := qc.OpenUniStream()
		if err == nil {
			_, err = u.Write(b)
		}
		if err != nil {
			qc.CloseWithError(0, "")
			return nil, err
		}
	}
	st, err := qc.OpenStreamSync(dctx)
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, err
	}
	st.SetDeadline(time.Now().Add(10 * time.Second))
	var block bytes.Buffer
	enc := qpack.NewEncoder(&block)
	for _, f := range []qpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "tlsidle.test"}, {Name: ":path", Value: "/"}} {
		enc.WriteField(f)
	}
	b := quicvarint.Append(quicvarint.Append(nil, 0x01), uint64(block.Len())) // HEADERS
	st.Write(append(b, block.Bytes()...))
	st.Close()
	resp, err := io.ReadAll(st)
	if err != nil || len(resp) == 0 {
		qc.CloseWithError(0, "")
		return nil, fmt.Errorf("GET over HTTP/3: %d bytes, %v", len(resp), err)
	}
	return qc, nil
}
