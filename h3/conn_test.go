package h3

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/sluice-proxy/sluice/internal/tlstest"
)

// TestShutdownBeforeServe: a connection that goes away before it is
// served (one taken while the server drains) sends GOAWAY with the id 0
// right after its SETTINGS, and rejects every request stream with
// H3_REQUEST_REJECTED (never processed: the client sends it again
// elsewhere); the handler never runs.
func TestShutdownBeforeServe(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	cert := ca.Server(t, "example.com")
	ln, err := quic.ListenAddrEarly("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*cert.TLS}, NextProtos: []string{ALPN}},
		QUICConfig(nil, false))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		qc, err := ln.Accept(context.Background())
		if err != nil {
			done <- err
			return
		}
		c := NewConn(qc, nil, func(*Stream) { served <- struct{}{} })
		c.Shutdown()
		done <- c.Serve()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "example.com", NextProtos: []string{ALPN}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer qc.CloseWithError(0, "")
	st, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var block []byte
	enc := qpack.NewEncoder(&appender{&block})
	for _, f := range []qpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "example.com"}, {Name: ":path", Value: "/"}} {
		enc.WriteField(f)
	}
	st.Write(append(quicvarint.Append(quicvarint.Append(nil, frameHeaders), uint64(len(block))), block...))
	st.Close()
	_, err = st.Read(make([]byte, 1))
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(ErrRequestRejected) {
		t.Fatalf("the request stream: %v, want H3_REQUEST_REJECTED", err)
	}

	ctrl, err := qc.AcceptUniStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(ctrl)
	if typ, err := quicvarint.Read(r); err != nil || typ != streamControl {
		t.Fatalf("stream type %d, %v; want the control stream", typ, err)
	}
	var frames []uint64
	for len(frames) < 2 {
		fh, err := readFrameHeader(r)
		if err != nil {
			t.Fatalf("after frames %x: %v", frames, err)
		}
		p := make([]byte, fh.len)
		if _, err := io.ReadFull(r, p); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, fh.typ)
		if fh.typ == frameGoAway {
			if id, err := parseGoAway(p); err != nil || id != 0 {
				t.Fatalf("GOAWAY %d, %v; want 0", id, err)
			}
		}
	}
	if frames[0] != frameSettings || frames[1] != frameGoAway {
		t.Fatalf("control frames %x, want SETTINGS then GOAWAY", frames)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return once the connection went away with nothing running")
	}
	select {
	case <-served:
		t.Fatal("the handler ran for a stream past the GOAWAY")
	default:
	}
}

type appender struct{ b *[]byte }

func (a *appender) Write(p []byte) (int, error) { *a.b = append(*a.b, p...); return len(p), nil }
